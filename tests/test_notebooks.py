"""The notebooks run top to bottom on tiny real runs (every code cell, in order, one namespace;
no Jupyter kernel needed) and write the files they promise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plume.harness.apps.train import run_job
from tests.conftest import TINY

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
FAST_ANALYSIS = {"restarts": 2, "selection": {"steps": 1}}


def _load(name: str) -> dict:
    notebook = json.loads((NOTEBOOKS / name).read_text())
    assert notebook["nbformat"] == 4 and notebook["nbformat_minor"] >= 4
    for cell in notebook["cells"]:
        assert cell["cell_type"] in ("code", "markdown") and isinstance(cell["source"], list)
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, \
                f"{name}: outputs must be cleared before committing"
    return notebook


def _execute(name: str, monkeypatch, env: dict[str, str]) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    namespace: dict = {"__name__": "__main__"}
    code_cells = [c for c in _load(name)["cells"] if c["cell_type"] == "code"]
    first = "".join(code_cells[0]["source"])
    for key in env:  # the first code cell reads its parameters from the environment
        assert key in first, f"{name}: the parameter cell does not read {key}"
    for index, cell in enumerate(code_cells):
        source = "".join(cell["source"])
        try:
            exec(compile(source, f"{name}[code cell {index}]", "exec"), namespace)  # noqa: S102
        except Exception as err:
            raise AssertionError(f"{name}: code cell {index} failed: {err!r}\n{source}") from err
    return namespace


@pytest.mark.parametrize("name", ["explore_dataset.ipynb", "sweep_report.ipynb"])
def test_notebooks_are_valid_nbformat_4_with_outputs_cleared(name):
    notebook = _load(name)
    assert notebook["metadata"]["kernelspec"]["language"] == "python"
    try:
        import nbformat
    except ImportError:
        return
    nbformat.validate(nbformat.reads(json.dumps(notebook), as_version=4))


def test_explore_dataset_notebook_runs_and_writes_its_figures(tmp_path, monkeypatch):
    out = tmp_path / "out"
    namespace = _execute("explore_dataset.ipynb", monkeypatch, {
        "PLUME_NOTEBOOK_DATASET": "balanced",
        "PLUME_NOTEBOOK_CACHE": str(tmp_path / "cache"),
        "PLUME_NOTEBOOK_OUT": str(out),
        "PLUME_NOTEBOOK_ANALYSIS": json.dumps(FAST_ANALYSIS),
    })
    folder = out / "explore_dataset"
    for stem in ("clusters", "clusters_mean_cv", "example_traces"):
        assert (folder / f"{stem}.png").is_file() and (folder / f"{stem}.pdf").is_file()
    assert (folder / "contingency.csv").is_file() and (folder / "kinds.csv").is_file()
    assert namespace["analysis"].k >= 2 and len(namespace["traces"]) == 1000
    assert list((tmp_path / "cache").glob("*.json")), "the analysis was not cached"


def test_sweep_report_notebook_draws_the_rliable_figures_of_tiny_runs(
        compose_cfg, tmp_path, monkeypatch):
    sweep = tmp_path / "runs" / "tiny"
    for sampler in ("uniform", "plume_static"):
        for seed in (0, 1):
            cfg = compose_cfg(*TINY, "logger=none", f"sampler={sampler}", f"seed={seed}",
                              "exp_name=tiny", f"paths.root={tmp_path / 'runs'}",
                              "analysis.restarts=2", "analysis.selection.steps=1")
            run_job(cfg, sweep / f"sampler={sampler}" / f"seed={seed}", {"sampler": sampler})
    out = tmp_path / "out"
    namespace = _execute("sweep_report.ipynb", monkeypatch, {
        "PLUME_NOTEBOOK_RUNS": str(sweep),
        "PLUME_NOTEBOOK_OUT": str(out),
        "PLUME_NOTEBOOK_REPS": "50",
    })
    folder = out / "sweep_report"
    assert (folder / "report.md").is_file()
    assert (folder / "curves.png").is_file() and (folder / "curves.pdf").is_file()
    pngs = sorted(folder.rglob("*.png"))
    assert len(pngs) >= 2, pngs
    assert len(namespace["runs"]) == 4
