"""BLAS's thread count: held to a session's `intra_op_num_threads` while it runs, and per product
to what the product gains from.

numpy's BLAS starts as many threads as there are cores. A session asked for one thread must not
run its GEMMs on two (onnxruntime's CPU provider honours the count), and a numba session's
threads must not fight BLAS's for the cores. threadpoolctl (optional: the `threads` extra) finds
the libraries; its `limit()` context re-queries every library on each call (about 5.5 us, half
of a tiny model's run), and even a found controller takes ~1.5 us a call, so this keeps
OpenBLAS's own getter and setter found once and calls them through ctypes (0.15-0.2 us).

Inside a run of a session with more than one thread, kernels multiply through `blas_matmul`,
which picks the count per product:
- products under `BLAS_SERIAL_MACS` multiply-adds run on one thread. A second thread saves
  at most half of their ~0.2 ms, and when another process holds the second core the call
  waits for a descheduled thread: 2-thread GEMMs of 2.4-4 M multiply-adds (text_cnn_like's
  convolutions, 0.1 ms serial) took 45-51 ms each on the loaded 2-core machine;
- larger ones get the session's threads unless `thread_contention.StallGuard` has seen a
  multi-threaded call lose to its serial time (the other core is taken: mlp's 51-67 M
  products went from 12 ms to 72 ms a run at 2 threads).
OpenBLAS's count is process-wide: sessions running at once from several Python threads share
it, as they did before.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .thread_contention import StallGuard

__all__ = ["BLAS_SERIAL_MACS", "BlasThreads", "blas_matmul", "blas_threads_for"]

BLAS_SERIAL_MACS = 1 << 23
"""Products with fewer multiply-adds (m * k * n per matrix, 8.4 M) run on one BLAS thread.
Measured (1 vs 2 threads, OpenBLAS 0.3.31, quiet moments of the 2-core machine): 4 M saves
40 us of 90, 17 M 150 us of 345; a descheduled helper thread costs milliseconds."""

GUARD = StallGuard()
"""The process's evidence of a taken core, shared by every session (the cores are shared)."""


class _Run:
    """The thread budget of the run in progress (process-wide, like BLAS's own count)."""

    threads = 0  # 0: no managed run, `blas_matmul` is plain np.matmul
    current = 0  # the count last set
    setters: list[Callable[[int], Any]] = []


_RUN = _Run()


def _fast_controls(lib: Any) -> tuple[Callable[[], int], Callable[[int], Any]]:
    """(get, set) of one library's thread count: OpenBLAS's own `openblas_get_num_threads` and
    `openblas_set_num_threads` (pthreads builds) as ctypes functions, found once (0.15 us a
    call); other libraries through threadpoolctl's controller (~1.5 us)."""
    dynlib = getattr(lib, "dynlib", None)
    pthreads = getattr(lib, "threading_layer", "") != "openmp"  # OpenMP builds: per thread
    if getattr(lib, "internal_api", "") == "openblas" and dynlib is not None and pthreads:
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_", "_64"):
                get = getattr(dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
                set_ = getattr(dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and set_ is not None:
                    get.restype = ctypes.c_int
                    get.argtypes = []
                    set_.restype = None
                    set_.argtypes = [ctypes.c_int]
                    return get, set_
    return lib.get_num_threads, lib.set_num_threads


class BlasThreads:
    """Sets BLAS to `threads` in `enter()` and restores the previous counts in `exit()`; in
    between, `blas_matmul` sets the count per product.

    Without threadpoolctl, or with no BLAS loaded, both are no-ops.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._controls: list[tuple[Callable[[], int], Callable[[int], Any]]] = []
        self._setters: list[Callable[[int], Any]] = []
        try:
            import numpy  # noqa: F401 - loads the BLAS that threadpoolctl must find
            from threadpoolctl import ThreadpoolController
        except ImportError:
            return
        libs = ThreadpoolController().select(user_api="blas").lib_controllers
        self._controls = [_fast_controls(lib) for lib in libs]
        self._setters = [set_ for _, set_ in self._controls]

    def enter(self) -> list[tuple[Callable[[int], Any], int]]:
        """Limit every BLAS library; returns what `exit` must restore. With more than one
        thread every library is listed (`blas_matmul` may change the count during the run)."""
        changed = []
        threads = self.threads
        for get, set_ in self._controls:
            current = get()
            if current != threads:
                set_(threads)
                changed.append((set_, current))
            elif threads > 1:
                changed.append((set_, current))
        if threads > 1 and self._controls:
            _RUN.threads = _RUN.current = threads
            _RUN.setters = self._setters
        return changed

    @staticmethod
    def exit(changed: list[tuple[Callable[[int], Any], int]]) -> None:
        _RUN.threads = 0
        for set_, count in changed:
            set_(count)


def blas_threads_for(macs: int, threads: int, key: Any = None) -> int:
    """BLAS threads for a product of `macs` multiply-adds per matrix in a session of `threads`
    (see the module docstring); `key` names the product's shapes for the stall guard."""
    if threads <= 1 or macs < BLAS_SERIAL_MACS:
        return 1
    return GUARD.threads_for(key, threads)


def blas_matmul(a: Any, b: Any, out: Any = None) -> Any:
    """np.matmul(a, b, out=out) on the BLAS threads the product gains from (inside a managed
    run of a session with threads; elsewhere plain np.matmul)."""
    run = _RUN
    if run.threads <= 1:
        return np.matmul(a, b, out=out)
    sa = a.shape
    sb = b.shape
    macs = (sa[-2] if len(sa) > 1 else 1) * (sa[-1] if sa else 1) * (sb[-1] if len(sb) > 1 else 1)
    key = (sa, sb)
    want = blas_threads_for(macs, run.threads, key)
    if run.current != want:
        _set(run, want)
    if macs < BLAS_SERIAL_MACS:  # serial for good: no evidence to gather
        return np.matmul(a, b, out=out)
    start = time.perf_counter()
    y = np.matmul(a, b, out=out)
    GUARD.record(key, want, time.perf_counter() - start)
    return y


def _set(run: _Run, count: int) -> None:
    for setter in run.setters:
        setter(count)
    run.current = count
