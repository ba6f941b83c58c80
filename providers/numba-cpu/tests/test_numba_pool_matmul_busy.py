"""`pool_matmul` over many shapes at 1, 2 and 3 threads, alone and beside a busy process.

Issue 32 asks that split products degrade gently when another process takes a core; whatever
the split, a product must come back whole (every element written, none twice with another
block's value) and equal to numpy's, and must not hang when a worker thread is descheduled for
whole scheduler slices. Beside a `while True: pass` process a worker of a 2-core machine is off
its core every few products, so these runs cross that case many times. Time is not asserted
(wall time on a shared machine is noise); a hang shows as the product thread still running after
a generous limit.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numba
import numpy as np
import pytest

from turnout.sdk.blas_threads import BlasThreads
from turnout_numba import cblas
from turnout_numba.kernels import pool_matmul as pm

pytestmark = pytest.mark.skipif(
    cblas.find_gemm("float32") is None,
    reason="numpy's BLAS exports no cblas_sgemm here (or threadpoolctl is missing)",
)

# (m, k, n): both split directions, sides that are not multiples of the 16-element column
# alignment or of the thread count, a side barely over the split, thin and wide products
SHAPES = [
    (64, 784, 1024),
    (64, 1024, 1024),
    (512, 1152, 49),
    (1000, 512, 169),
    (33, 1000, 333),
    (97, 301, 211),
    (2, 4096, 1024),
    (1024, 300, 17),
    (129, 257, 130),
]


@pytest.fixture
def busy() -> Iterator[None]:
    """A CPU-bound loop in another process for the test's duration."""
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        loop.kill()
        loop.wait()


def _products(threads: int, repeats: int) -> list[str]:
    """Every shape `repeats` times inside a managed run of `threads` threads, each checked
    against np.matmul on one BLAS thread; the mismatches, described."""
    saved = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    rng = np.random.default_rng(threads)
    operands = [
        (
            rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32),
        )
        for m, k, n in SHAPES
    ]
    changed = BlasThreads(threads).enter()
    try:
        want = [np.matmul(a, b) for a, b in operands]  # BLAS is held to one thread here
        bad = []
        for r in range(repeats):
            for (a, b), w in zip(operands, want, strict=True):
                out = np.full(w.shape, np.nan, np.float32)
                got = pm.pool_matmul(a, b, out=out)
                if got is not out or np.isnan(out).any():
                    bad.append(f"{a.shape} @ {b.shape} round {r}: output not whole")
                elif not np.allclose(out, w, rtol=1e-5, atol=1e-4):
                    bad.append(f"{a.shape} @ {b.shape} round {r}: differs from numpy")
        return bad
    finally:
        BlasThreads.exit(changed)
        numba.set_num_threads(saved)


def _within(seconds: float, fn: Any, *args: Any) -> Any:
    """fn(*args) on another thread; fails the test if it has not returned in `seconds`."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn(*args))
        except BaseException as e:  # re-raised in the test
            errors.append(e)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"products still running after {seconds} s: a hang"
    if errors:
        raise errors[0]
    return result[0]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_products_whole_and_equal_to_numpy(threads: int) -> None:
    assert _within(120, _products, threads, 3) == []


@pytest.mark.parametrize("threads", [2, 3])
def test_products_whole_and_equal_beside_a_busy_process(busy: None, threads: int) -> None:
    assert _within(300, _products, threads, 20) == []
