"""The layering of docs/ARCHITECTURE.md, checked on the code: the report and the harness do
not import each other, nothing uses Hydra's private API, and functions fit on a screen."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for folder in ("plume", "hydra_plugins", "experiments")
           for p in sorted((ROOT / folder).rglob("*.py"))]


@pytest.mark.parametrize("module, forbidden", [
    ("plume.report", "plume.harness"),
    ("plume.report.builder", "plume.harness"),
    ("plume.harness.train", "plume.report"),
    ("plume.harness.analyze", "plume.report"),
])
def test_a_layer_loads_nothing_of_the_layer_beside_it(module, forbidden):
    code = (f"import sys, {module}; "
            f"print(sorted(m for m in sys.modules if m.startswith('{forbidden}')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


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
