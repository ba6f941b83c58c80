"""Fixtures for every test tree of the repository (tests/, providers/*/tests, plugin_template).

`rng` is seeded from the test's node id, so a test draws the same data whatever ran before it
(a `-k` selection, `-x`, another order or worker), never from a generator shared by a module.

`CPUExecutionProvider` means the host (turnout-numba, when installed, serves CPU requests). The
tests of the numpy kernels and the references that provider tests compare against must be the
numpy kernels, so every test runs with the numpy-only switch set, except tests marked
`cpu_means_host`, which check the host path itself.

A provider's tests need its distribution: where it is not installed (a core-only install), its
tests folder is reported as one skipped collector naming the package and how to install it,
instead of failing on its conftest's imports. The root pyproject's testpaths name `providers`,
not each tests folder, so that pytest reaches those folders here first (a folder named in
testpaths has its conftest imported before any hook can look at it).
"""

from __future__ import annotations

import importlib.util
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).parent
# a provider's tests folder -> the package its tests import
TESTBED_IMPORT = re.compile(r"^\s*(from|import)\s+turnout_testbed\b", re.M)
PROVIDER_TESTS = {
    "providers/numba-cpu/tests": "turnout_numba",
    "providers/opencl/tests": "turnout_opencl",
    "providers/cupy-cuda/tests": "turnout_cupy",
}


@pytest.fixture(autouse=True)
def _cpu_numpy_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("cpu_means_host") is None:
        monkeypatch.setenv("TURNOUT_CPU_NUMPY_ONLY", "1")
    else:
        monkeypatch.delenv("TURNOUT_CPU_NUMPY_ONLY", raising=False)


def stable_seed(key: str) -> int:
    """A seed that depends on `key` alone (`hash()` of a str is salted per process)."""
    return zlib.crc32(key.encode())


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from this test's node id (its path, name and parameters)."""
    return np.random.default_rng(stable_seed(request.node.nodeid))


class NotInstalled(pytest.Collector):
    """Tests whose package is not installed (a provider's tests folder, or a test module that
    imports turnout-testbed): collecting them skips, with why.

    The node takes its parent's path, so that this conftest's hooks still apply to it (pytest
    looks hooks up by the conftests loaded for a node's path, and the folder's are never loaded).
    """

    folder = Path()
    reason = ""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        pytest.skip(self.reason)


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Skip a provider's tests folder, without importing its conftest, when its package is not
    installed; a package that is installed but fails to import still fails collection."""
    folder = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else ""
    package = PROVIDER_TESTS.get(folder)
    if package is None or _installed(package):
        return None
    node = NotInstalled.from_parent(parent, name=path.name, nodeid=folder)
    node.folder = path
    distribution = path.parent.relative_to(ROOT).as_posix()
    node.reason = f"{package} is not installed (pip install -e ./{distribution})"
    return node


@pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport | None:
    """The skip of a NotInstalled folder, reported at the folder (`-ra` prints
    `SKIPPED [1] providers/numba-cpu/tests: turnout_numba is not installed (...)`)."""
    if not isinstance(collector, NotInstalled):
        return None
    # no line number: pytest prints the location as the folder alone (its stubs want an int)
    location = (str(collector.folder), None, collector.reason)
    return pytest.CollectReport(collector.nodeid, "skipped", location, result=[])  # type: ignore[arg-type]


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    """A test module that imports turnout-testbed (test and benchmark models, the fake device:
    a distribution of its own, out of the runtime wheel) skips where it is not installed."""
    if _installed("turnout_testbed") or not TESTBED_IMPORT.search(module_path.read_text()):
        return None
    node = NotInstalled.from_parent(parent, name=module_path.name, nodeid=_nodeid(module_path))
    node.folder = module_path
    node.reason = "turnout_testbed is not installed (pip install -e ./testbed)"
    return node


def _nodeid(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False
