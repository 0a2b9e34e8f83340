"""The rules of docs/ARCHITECTURE.md, checked on the code.

- Layers import down only (:data:`LAYERS`), checked statically on every import, at module level
  and inside functions; layers side by side (the report and the harness) import neither way,
  and the algorithms know nothing of traces or samplers.
- Only the packages :data:`ONLY_IN` names import Hydra, OmegaConf, W&B, rliable or matplotlib;
  the traces never import torch, and the deployment runtime runs without it.
- No import cycle between files (module-level imports: what runs when a module is imported);
  an import inside a function that crosses layers says why, on its own line.
- Importing a module registers nothing with Hydra or OmegaConf: the apps register Plume's
  configs when they start, and a task sent to a launcher's worker registers them there.
- An environment is its own package: outside it no module imports it by name or keeps a table
  or a branch keyed by its name.
- Each contract paragraph names its hooks: the methods a subclass must write are the ones
  written as calls (``name(...)``), optional or provided ones are written bare (``name``).
- Nothing uses Hydra's private API, and functions fit on a screen.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
SOURCES = [p for folder in ("plume", "hydra_plugins", "experiments")
           for p in sorted((ROOT / folder).rglob("*.py"))]

LAYERS = (  # bottom to top: a module imports nothing of a layer above its own
    ("plume", "plume.checks", "plume.user_modules", "plume.figures"),  # the root modules
    ("plume.traces",),
    ("plume.analysis",),
    ("plume.sampling",),
    ("plume.envs",),
    ("plume.agents",),
    ("plume.runs",),  # the run record (file names, states) and its store
    ("plume.deploy",),
    ("plume.emulation",),  # links, namespaces, sessions: no Hydra (plume-emulate's app is harness's)
    ("plume.harness", "plume.harness.config"),  # the typed job config, its checks, conf/
    ("plume.harness.training", "plume.harness.integrations"),  # the runtime; W&B and Optuna
    ("plume.harness.apps",),  # the command-line apps, each handing its job to the lifecycle
    ("hydra_plugins",),  # the plume sweepers, on the harness's sweep module
    ("plume.report",),
    ("experiments",),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
SLICES = {"deploy": "plume.deploy", "emulate": "plume.emulation", "networks": "plume.agents"}
"""``plume/envs/<env>/<slice>.py``: the part of an environment that builds on an upper layer
belongs to that layer (``plume.envs.registry``: only that layer loads it)."""
APART = {
    "plume.report": ("plume.harness",),  # beside each other: both read the run record
    "plume.agents": ("plume.traces", "plume.analysis", "plume.sampling"),  # no traces, no sampler
    "plume.harness.training": ("plume.harness.integrations",),  # a tracker is passed in
    "plume.harness.integrations": ("plume.harness.training",),
}
"""Layers a layer must not import although they are below it."""

HYDRA_USERS = ("plume.harness", "experiments", "hydra_plugins")
PLOTTERS = ("plume.report", "experiments", "plume.analysis.figures", "plume.figures",
            "plume.harness.integrations.tune")  # the search's own figures (Optuna's history, importances)
ONLY_IN = {"hydra": HYDRA_USERS, "omegaconf": HYDRA_USERS, "wandb": ("plume.harness",),
           "rliable": PLOTTERS, "matplotlib": PLOTTERS}
"""Third-party packages and the only code that may import them."""
NEVER_IN = {"torch": ("plume.traces",)}
"""Third-party packages and code that must not import them (the deployment runtime's
torch-freedom is checked by running it: :func:`test_the_deployment_runtime_imports_no_torch`)."""
GENERIC = ("plume.harness", "plume.report", "plume.deploy", "plume.emulation", "plume.agents",
           "plume.runs")
"""Code that an environment never touches (it reaches environments through their EnvSpec)..."""
PROTOCOL_ADAPTERS = ("plume.deploy.adapters",)
"""... but for the adapters, each of which speaks one system's protocol (Pensieve, Puffer, PCC)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SOURCES}


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> str | None:
    """The layer of a first-party module (None for anything else)."""
    parts = module.split(".")
    if parts[:2] == ["plume", "envs"] and len(parts) > 3 and parts[3] in SLICES:
        return SLICES[parts[3]]
    return next((".".join(parts[:k]) for k in range(len(parts), 0, -1)
                 if ".".join(parts[:k]) in RANK), None)


@dataclass(frozen=True)
class Import:
    """One imported module: ``target`` (the submodule when ``from pkg import sub`` names one),
    imported by ``module`` at ``where``, ``top`` when it runs as the module is imported,
    ``reason`` when the statement carries a comment."""

    module: str
    where: str
    target: str
    top: bool
    reason: bool = False


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def imports_of(path: Path) -> list[Import]:
    """Every import statement of ``path``, at any depth."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    source = path.read_text()
    lines = source.splitlines()

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                where = f"{path.relative_to(ROOT)}:{child.lineno}"
                reason = any("#" in line for line in lines[child.lineno - 1:child.end_lineno])
                found.extend(Import(module, where, t, top, reason)
                             for t in _targets(child, package))
            visit(child, top and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(source), True)
    return list(dict.fromkeys(found))  # ``from pkg import a, b``: pkg once


IMPORTS = [i for p in SOURCES for i in imports_of(p)]


# ---------------------------------------------------------------------------------- layers
def test_no_module_imports_a_layer_above_its_own():
    up = [f"{i.where}: {i.module} ({layer(i.module)}) imports {i.target} ({layer(i.target)})"
          for i in IMPORTS if layer(i.module) and layer(i.target)
          and RANK[layer(i.target)] > RANK[layer(i.module)]]
    assert not up, "\n".join(up)


def test_layers_kept_apart_import_nothing_of_each_other():
    found = [f"{i.where}: {i.module} imports {i.target}" for i in IMPORTS
             if within(i.target, APART.get(layer(i.module) or "", ()))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module, forbidden", [
    ("plume.report", "plume.harness"),
    ("plume.report.builder", "plume.harness"),
    ("plume.harness.apps.train", "plume.report"),
    ("plume.harness.apps.analyze", "plume.report"),
])
def test_a_layer_loads_nothing_of_the_layer_beside_it(module, forbidden):
    code = (f"import sys, {module}; "
            f"print(sorted(m for m in sys.modules if m.startswith('{forbidden}')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_an_import_inside_a_function_across_layers_says_why():
    """A function-local import hides a dependency from the module's head; across layers it
    carries a one-line reason (what it keeps from loading: torch, a plugin at Hydra's start)."""
    silent = [f"{i.where}: {i.module} imports {i.target}" for i in IMPORTS
              if not i.top and not i.reason and layer(i.module) and layer(i.target)
              and layer(i.module) != layer(i.target)]
    assert not silent, "\n".join(silent)


# ---------------------------------------------------------------------- third-party packages
def test_hydra_wandb_and_plotting_are_imported_only_where_allowed():
    found = [f"{i.where}: {i.module} imports {i.target} (only {', '.join(allowed)} may)"
             for i in IMPORTS
             if (allowed := ONLY_IN.get(i.target.split(".")[0])) and not within(i.module, allowed)]
    found += [f"{i.where}: {i.module} imports {i.target}" for i in IMPORTS
              if within(i.module, NEVER_IN.get(i.target.split(".")[0], ()))]
    assert not found, "\n".join(found)


def test_the_deployment_runtime_imports_no_torch():
    """Importing the runtime, its sessions, plume-serve and the adapters with torch (and the
    training and reporting stack) unimportable; ``tests/test_deploy.py``'s
    ``test_a_fresh_process_without_torch_decides_identically`` runs a whole export so."""
    script = textwrap.dedent("""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "hydra", "omegaconf", "wandb", "matplotlib",
                                          "rliable"):
                    raise ImportError(f"{name} is blocked in this test")
        sys.meta_path.insert(0, Block())
        import plume.deploy, plume.deploy.runtime, plume.deploy.sessions, plume.deploy.serve
        import plume.deploy.adapters.pcc, plume.deploy.adapters.pensieve
        import plume.deploy.adapters.puffer
        assert "torch" not in sys.modules
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


# --------------------------------------------------------------------------- side effects
REGISTERED = textwrap.dedent("""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf
    def registered():
        return (OmegaConf.has_resolver("plume_dirname"),
                sorted(ConfigStore.instance().repo.get("schema", {})))
""")


def test_importing_every_module_registers_nothing():
    script = REGISTERED + textwrap.dedent(f"""
        import importlib
        for name in {sorted(m for m in MODULES if not m.startswith("hydra_plugins"))!r}:
            importlib.import_module(name)
        print(registered())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(False, [])"


def test_a_task_unpickled_in_a_fresh_process_registers_the_configs(tmp_path):
    """What a joblib, submitit or Ray worker does with the task function it is sent."""
    import pickle

    from plume.harness.apps.entry import HydraTask
    from plume.harness.apps.train import train_job

    (tmp_path / "task.pkl").write_bytes(pickle.dumps(HydraTask(train_job)))
    script = REGISTERED + textwrap.dedent(f"""
        import pickle, pathlib
        before = registered()
        task = pickle.loads(pathlib.Path({str(tmp_path / "task.pkl")!r}).read_bytes())
        print(before, registered(), task.__name__)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(False, []) (True, ['algo', 'sampler']) train_job"


# ------------------------------------------------------------------------------ file cycles
def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph`` with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_no_import_cycle_between_files():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for i in IMPORTS:
        if i.top and i.target in MODULES and i.target != i.module:
            graph[i.module].add(i.target)
    assert not strongly_connected(graph)


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]


# ------------------------------------------------------------------------- environments
def _names_an_env(node: ast.AST, envs: set[str]) -> bool:
    """A table keyed by an env name (or by a tuple holding one), or a branch comparing with one."""
    def is_env(n: ast.AST | None) -> bool:
        return isinstance(n, ast.Constant) and n.value in envs or (
            isinstance(n, (ast.Tuple, ast.List, ast.Set)) and any(map(is_env, n.elts)))
    if isinstance(node, ast.Dict):
        return any(map(is_env, node.keys))
    return isinstance(node, ast.Compare) and any(map(is_env, [node.left, *node.comparators]))


def test_no_generic_module_names_an_environment():
    """Adding an environment touches its own package, its config and a registry line: the
    layers above reach it through its EnvSpec, never by importing it or keying on its name."""
    from plume.envs.registry import ENV_PACKAGES

    envs = set(ENV_PACKAGES)
    found = [f"{i.where}: {i.module} imports {i.target}" for i in IMPORTS
             if within(i.module, GENERIC) and not within(i.module, PROTOCOL_ADAPTERS)
             and within(i.target, tuple(ENV_PACKAGES.values()))]
    for module, path in MODULES.items():
        if within(module, GENERIC) and not within(module, PROTOCOL_ADAPTERS):
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: a table or branch on an env name"
                      for node in ast.walk(ast.parse(path.read_text()))
                      if _names_an_env(node, envs)]
    assert not found, "\n".join(found)


# ------------------------------------------------------------------------------ contracts
def doc_paragraph(title: str) -> str:
    """The paragraph of docs/ARCHITECTURE.md that starts with ``**<title>**``."""
    text = DOC.read_text()
    start = text.find(f"**{title}**")
    assert start >= 0, f"docs/ARCHITECTURE.md has no **{title}** paragraph"
    end = text.find("\n\n", start)
    return text[start:] if end < 0 else text[start:end]


def named(paragraph: str) -> tuple[set[str], set[str]]:
    """(methods written as calls ``name(...)``, constructors aside; names written bare). A hook
    written as a call somewhere may be named bare elsewhere (``it calls `learn` ...``)."""
    spans = re.findall(r"`([^`]+)`", paragraph)
    calls = {m[1] for s in spans if (m := re.match(r"([a-z_]\w*)\(", s)) and m[1] != "cls"}
    return calls, {s for s in spans if re.fullmatch(r"[a-z_]\w*", s)}


@pytest.mark.parametrize("title, module, exact", [
    ("Algorithm", "plume.agents.base", True),
    ("TraceVecEnv", "plume.envs.vector", True),
    ("TraceSampler", "plume.sampling.base", False),
])
def test_a_contract_paragraph_names_the_hooks_of_its_base_class(title, module, exact):
    """``exact``: the calls are the abstract methods. The TraceSampler paragraph also writes
    as calls the methods with defaults a sampler extends (``update``, ``state_dict``...), so
    there the abstract methods are among the calls, and every call is a method of the base."""
    base = getattr(importlib.import_module(module), title)
    calls, bare = named(doc_paragraph(title))
    abstract = set(base.__abstractmethods__)
    if exact:
        assert calls == abstract, (f"documented {sorted(calls)}, abstract {sorted(abstract)}")
    else:
        assert abstract <= calls, f"undocumented: {sorted(abstract - calls)}"
        assert all(callable(getattr(base, c, None)) for c in calls), sorted(calls)
    optional = {b for b in bare - calls if callable(getattr(base, b, None))}
    assert not optional & abstract, f"written bare but abstract: {sorted(optional & abstract)}"


def test_every_environment_provides_the_vector_env_hooks():
    from plume.envs.registry import ENV_PACKAGES
    from plume.envs.vector import TraceVecEnv
    from plume.user_modules import import_user_module

    for package in ENV_PACKAGES.values():  # every module: a package loads its simulator lazily
        for found in pkgutil.iter_modules(importlib.import_module(package).__path__):
            importlib.import_module(f"{package}.{found.name}")
    import_user_module(str(ROOT / "examples" / "custom_env" / "link_share.py"), "env.package",
                       "plume_user_env")
    classes, todo = [], list(TraceVecEnv.__subclasses__())
    while todo:
        classes.append(todo.pop())
        todo += classes[-1].__subclasses__()
    names = {c.__name__ for c in classes}
    assert {"TraceBenchVecEnv", "AbrVecEnv", "CcVecEnv", "LbVecEnv", "LinkShareEnv"} <= names
    assert not [c.__name__ for c in classes if inspect.isabstract(c)]


def test_an_environment_without_a_hook_is_refused_when_built():
    from plume.envs.vector import TraceVecEnv

    class Half(TraceVecEnv):
        def step(self, actions):
            raise AssertionError

        def _observation(self):
            raise AssertionError

    with pytest.raises(TypeError, match=r"Half does not implement the TraceVecEnv hook\(s\) "
                                        r"_episode_fields, _restart"):
        Half()


# ------------------------------------------------------------------------------ the code
def test_no_private_hydra_api():
    private = ("hydra._internal", "__wrapped__", "_return_value")
    found = [f"{p.relative_to(ROOT)}: {word}" for p in SOURCES
             for word in private if word in p.read_text()]
    assert not found


def test_every_function_fits_on_a_screen():
    long = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} {lines}")
    assert not long
