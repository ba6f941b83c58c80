"""Fixtures for every test tree of the repository (tests/, providers/*/tests, plugin_template).

`rng` is seeded from the test's node id, so a test draws the same data whatever ran before it
(a `-k` selection, `-x`, another order or worker), never from a generator shared by a module.

`CPUExecutionProvider` means the host (turnout-numba, when installed, serves CPU requests). The
tests of the numpy kernels and the references that provider tests compare against must be the
numpy kernels, so every test runs with the numpy-only switch set, except tests marked
`cpu_means_host`, which check the host path itself.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest


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
