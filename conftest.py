"""Fixtures for every test tree of the repository (tests/, providers/*/tests, plugin_template).

`rng` is seeded from the test's node id, so a test draws the same data whatever ran before it
(a `-k` selection, `-x`, another order or worker), never from a generator shared by a module.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest


def stable_seed(key: str) -> int:
    """A seed that depends on `key` alone (`hash()` of a str is salted per process)."""
    return zlib.crc32(key.encode())


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from this test's node id (its path, name and parameters)."""
    return np.random.default_rng(stable_seed(request.node.nodeid))
