"""Code quality gates that CI enforces: ruff (lint + format) on the repo, mypy strict on every
package (core, conformance, the providers, the plugin template: the root pyproject's `files`),
core's import contracts and the generated layer picture of docs/architecture.md."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed (pip install ruff)")
def test_ruff_check_and_format() -> None:
    check = _run("ruff", "check", ".")
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = _run("ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def _every_package_installed() -> None:
    """mypy and the import contracts read every package (core, conformance, the providers)."""
    packages = ("turnout_conformance", "turnout_testbed", "turnout_numba", "turnout_opencl")
    for package in (*packages, "turnout_cupy"):
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{package} is not installed: these checks cover every package")


def test_mypy_strict_on_every_package() -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    _every_package_installed()
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_import_contracts_hold() -> None:
    """Core's layers, no cycles inside a package, providers on the SDK (`.importlinter`)."""
    pytest.importorskip("importlinter", reason="import-linter is not installed (core[test])")
    _every_package_installed()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "plugin_template" / "src")}
    lint = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports as lint; "
            "sys.exit(lint(no_cache=True))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert lint.returncode == 0, lint.stdout[-5000:] + lint.stderr[-2000:]


def test_core_has_no_import_cycle() -> None:
    """Imports inside functions count: no two modules of core import each other, directly or
    through others (the largest strongly connected component was 49 modules before the layers;
    import-linter's contract checks siblings only, this checks the whole graph)."""
    graph = _import_graph()
    cycles = [c for c in graph.strongly_connected(graph.graph()) if len(c) > 1]
    assert not cycles, cycles


def test_the_layer_picture_is_current() -> None:
    graph = _import_graph()
    assert graph.main(["--check", str(ROOT / "docs" / "architecture.md")]) == 0


def _import_graph() -> Any:
    spec = importlib.util.spec_from_file_location(
        "import_graph", ROOT / "tools" / "import_graph.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
