"""Fixtures for the fuzz suite: the node-test seeds (loaded once, ~10 s) and one worker pool.

The fuzzer lives in the top-level `fuzz/` folder (it is a tool, not an installed package), so the
repository root goes on sys.path here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fuzz.pool import Pool  # noqa: E402
from fuzz.seeds import SeedPool, load_seeds  # noqa: E402


@pytest.fixture(scope="session")
def fuzz_pool() -> Iterator[Pool]:
    """Two crash-isolated workers (the CI machine has two cores)."""
    with Pool(jobs=2, timeout=120.0, memory_mb=4096) as pool:
        yield pool


@pytest.fixture(scope="session")
def available(fuzz_pool: Pool) -> set[str]:
    return set(fuzz_pool.providers())


@pytest.fixture(scope="session")
def seed_pool() -> SeedPool:
    return load_seeds()


@pytest.fixture(scope="session")
def require(available: set[str]) -> Callable[[str], None]:
    """`require(provider)` skips the test, saying why, where the provider is missing."""

    def check(provider: str) -> None:
        if provider not in available:
            pytest.skip(f"{provider} is not installed or not usable on this machine")

    return check
