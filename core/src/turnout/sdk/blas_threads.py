"""BLAS's thread count: held to a session's `intra_op_num_threads` while it runs; inside the run,
products large enough are split between the caller and turnout's own helper threads.

numpy's BLAS starts as many threads as there are cores. A session asked for one thread must not
run its GEMMs on two (onnxruntime's CPU provider honours the count), and a numba session's
threads must not fight BLAS's for the cores. threadpoolctl finds the libraries (a dependency:
when it was an extra, the README's install ran one-thread sessions' products on every core);
its `limit()` context re-queries every library on each call (about 5.5 us, half of a tiny
model's run), and even a found controller takes ~1.5 us a call, so this keeps
OpenBLAS's own getter and setter found once and calls them through ctypes (0.15-0.2 us).

Inside a run of a session with more than one thread, kernels multiply through `blas_matmul`,
which runs every product on one BLAS thread:
- products under `BLAS_SERIAL_MACS` multiply-adds run whole in the caller (a second thread
  saves at most half of their ~0.2 ms);
- larger ones are cut into `BLOCKS_PER_THREAD` column (or row) blocks per thread, each one
  single-threaded BLAS call into its slice of the output. The caller posts the blocks to
  `threads - 1` helper threads and takes blocks itself from the same counter, so a helper that
  is not scheduled yet costs nothing: the caller does its blocks too (onnxruntime's thread pool
  works this way). A helper multiplies into its own scratch and copies into the output once it
  has committed the block; a block still not committed when the caller has waited as long as
  one of its own blocks took (the helper descheduled in the middle of it) is taken back and
  multiplied by the caller, and the helper's late result is dropped.
OpenBLAS's own threads cannot do that: a call on two threads waits for both, and when another
process holds the second core the helper is descheduled. Measured on the 2-core VM with other
work on it, 2-thread OpenBLAS calls of 0.3-0.4 ms (serial) took 30-70 ms; the stall guard that
held products serial after such a loss (`thread_contention.StallGuard`, until 2026-12-01) tripped
on this noisy machine and kept it serial nearly all the time (densenet121, squeezenet: 2t/1t
0.96-1.02). Split here, with the machine to itself (the process at real-time priority), a
17-115 M product took 0.35-0.9 of its serial time, as OpenBLAS's two threads did; with six
other processes runnable, 1.0-1.3x its serial time at the median (OpenBLAS's: 30-200x).
OpenBLAS's count is process-wide: sessions running at once from several Python threads share
it, as they did before; their products share the helpers (a busy helper's blocks are the
caller's). Each run's thread budget is its own thread's (`_Run`).
"""

from __future__ import annotations

import _thread
import ctypes
import functools
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["BLAS_SERIAL_MACS", "BlasThreads", "blas_matmul", "blas_threads_for", "run_threads"]

BLAS_SERIAL_MACS = 1 << 23
"""Products with fewer multiply-adds (m * k * n, times the batch, 8.4 M) run whole in the
caller. Measured (1 vs 2 threads, OpenBLAS 0.3.31, quiet moments of the 2-core machine): 4 M
saves 40 us of 90, 17 M 150 us of 345."""

BLOCKS_PER_THREAD = 2
"""A split product is cut into this many blocks per thread: a helper that starts late still
takes a share, and the caller's wait for a started block is a fraction of the product."""

_ALIGN = 16  # block widths are multiples of 16 elements (a 64-byte line of float32)
_SPLIT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class _Run(threading.local):
    """The thread budget of the run in progress on this Python thread. Per thread: a session
    running beside another (each from its own thread) keeps its own budget, where a shared one
    was overwritten by whichever run started or ended last. BLAS's count, which `run_threads`
    holds at one, stays process-wide."""

    threads = 0  # 0: no managed run, `blas_matmul` is plain np.matmul
    current = 0  # the count last set
    depth = 0  # providers of this thread's run that entered (each provider enters once)
    setters: tuple[Callable[[int], Any], ...] = ()


class _Shared:
    """BLAS's thread count is one for the process: how many Python threads are in a managed
    run, and the counts BLAS had before the first of them began (restored when the last ends).
    A run that met another set the count to one; a lone run's exit used to restore the count it
    saw at entry while the other run was still splitting its products (measured: 5 of 60 runs
    from 4 threads differed from the lone run's result by 1 ulp).

    `touched`: whether anything set a count since the first run began. A run that found BLAS
    at its count already (a process started with `OPENBLAS_NUM_THREADS=1` serving one-thread
    sessions) set nothing and has nothing to restore: its end skips the setters (0.2 us each
    through ctypes, a tenth of a tiny model's fixed cost). The counts are read again at each
    first entry, so a count the caller changed between runs is the one held back to."""

    lock = threading.Lock()
    active = 0
    touched = False
    saved: list[tuple[Callable[[int], Any], int]] = []


_RUN = _Run()
_SHARED = _Shared()


_FREE, _HELPING, _COMMITTED, _TAKEN_BACK = 0, 1, 2, 3  # a block's state (helpers' blocks)


class _Job:
    """One split product: blocks (a, b, out) taken in turn by the caller and the helpers;
    whoever completes the last block releases `finished`.

    A helper multiplies into its own scratch array and copies into `out` only after marking the
    block committed, so the caller can take back a block whose helper was descheduled in the
    middle of it (`call`) and never sees `out` written after it returned."""

    __slots__ = ("count", "done", "error", "finished", "lock", "next", "parts", "state")

    def __init__(self, parts: list[tuple[Any, Any, Any]]) -> None:
        self.parts = parts
        self.count = len(parts)
        self.next = 0
        self.state = [_FREE] * self.count
        self.lock = _thread.allocate_lock()  # guards next and state
        self.done = itertools.count()  # next() is atomic under the GIL
        self.finished = _thread.allocate_lock()
        self.finished.acquire()
        self.error: BaseException | None = None

    def _take(self, state: int) -> int:
        with self.lock:
            i = self.next
            if i < self.count:
                self.next = i + 1
                self.state[i] = state
            return i

    def call(self) -> None:
        """The caller's share: blocks until none is left; then it waits for the helpers'
        blocks in progress, as long as one of its own blocks took, and multiplies the ones
        still not committed itself."""
        parts = self.parts
        last = self.count - 1
        mine = 0
        start = time.perf_counter()
        while (i := self._take(_FREE)) <= last:
            a, b, out = parts[i]
            np.matmul(a, b, out=out)
            mine += 1
            if next(self.done) == last:
                return
        if not mine:
            self.finished.acquire()
            return
        if self.finished.acquire(timeout=(time.perf_counter() - start) / mine):
            return
        with self.lock:
            late = [i for i, st in enumerate(self.state) if st == _HELPING]
            for i in late:
                self.state[i] = _TAKEN_BACK
        for i in late:
            a, b, out = parts[i]
            np.matmul(a, b, out=out)
            if next(self.done) == last:
                return
        self.finished.acquire()  # committed blocks being copied

    def help(self, scratch: dict[Any, Any]) -> None:
        """A helper's share: blocks into scratch, each copied to `out` unless taken back."""
        parts = self.parts
        last = self.count - 1
        while (i := self._take(_HELPING)) <= last:
            a, b, out = parts[i]
            buf = scratch.get(out.dtype)
            if buf is None or buf.size < out.size:
                buf = scratch[out.dtype] = np.empty(out.size, out.dtype)
            tmp = buf[: out.size].reshape(out.shape)
            try:
                np.matmul(a, b, out=tmp)
            except BaseException as e:  # re-raised by the caller
                self.error = e
                tmp = None
            with self.lock:
                if self.state[i] == _TAKEN_BACK:
                    continue
                self.state[i] = _COMMITTED
            if tmp is not None:
                np.copyto(out, tmp)
            if next(self.done) == last:
                self.finished.release()


class _Helpers:
    """Daemon threads that take blocks of posted products (started on first need)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.started = 0
        self.lock = threading.Lock()

    def post(self, job: _Job, helpers: int) -> None:
        if self.started < helpers:
            with self.lock:
                while self.started < helpers:
                    threading.Thread(
                        target=_serve, args=(self.jobs,), name="turnout-blas", daemon=True
                    ).start()
                    self.started += 1
        for _ in range(helpers):
            self.jobs.put(job)


def _serve(jobs: queue.SimpleQueue[_Job]) -> None:
    scratch: dict[Any, Any] = {}  # dtype -> this helper's block buffer
    while True:
        job = jobs.get()
        job.help(scratch)
        del job  # no reference to the arrays while waiting


_HELPERS = _Helpers()


def _forget_helpers() -> None:  # a forked child has none of its parent's threads
    global _HELPERS
    _HELPERS = _Helpers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


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


@functools.cache
def _blas_controls() -> tuple[tuple[Callable[[], int], Callable[[int], Any]], ...]:
    """Every loaded BLAS library's count getter and setter, found once per process:
    threadpoolctl's discovery walks the loaded libraries (5-9 ms, issue 27), which every
    session's provider paid. A BLAS first loaded after the first session is not seen."""
    try:
        import numpy  # noqa: F401 - loads the BLAS that threadpoolctl must find
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return ()
    libs = ThreadpoolController().select(user_api="blas").lib_controllers
    return tuple(_fast_controls(lib) for lib in libs)


class BlasThreads:
    """Sets BLAS to `threads` in `enter()` and restores the previous counts in `exit()`; in
    between, `blas_matmul` runs products on one BLAS thread and splits the large ones.

    Without threadpoolctl, or with no BLAS loaded, both are no-ops.

    Both are on every run's path (a run of a one-Relu model costs onnxruntime ~4 us), so they
    do the least that keeps the counts right: a nested enter (the second provider of a run)
    only counts itself; the first reads each count once and sets only a count that differs;
    the last exit restores only when something was set (`_Shared.touched`).
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._controls = list(_blas_controls())
        self._setters = tuple(set_ for _, set_ in self._controls)

    def enter(self) -> list[tuple[Callable[[int], Any], int]]:
        """Limit every BLAS library for the run starting on this Python thread; pass what it
        returns to `exit` at the run's end. BLAS's count is process-wide: while runs of more
        than one Python thread overlap it stays at one (`_Shared`), so no run's products are
        split by BLAS mid-block because another run set its own count.

        A second provider of the same run (the CPU provider behind turnout-numba) enters
        nested and returns at once: the first set the count for the whole run."""
        run = _RUN
        depth = run.depth
        run.depth = depth + 1
        if depth:
            return _NOTHING
        threads = self.threads
        shared = _SHARED
        lock = shared.lock
        lock.acquire()  # not `with`: 0.08 us less per run, twice
        try:
            if shared.active == 0:
                want = threads
                saved = []
                touched = False
                for get, set_ in self._controls:
                    count = get()
                    saved.append((set_, count))
                    if count != want:
                        set_(want)
                        touched = True
                shared.saved = saved
                shared.touched = touched
            else:  # another thread's run is in progress: one BLAS thread for both
                want = 1
                for get, set_ in self._controls:
                    if get() != 1:
                        set_(1)
                        shared.touched = True
            shared.active += 1
        except BaseException:  # a failed BLAS call must not leave this thread "nested"
            run.depth = depth
            raise
        finally:
            lock.release()
        if threads > 1 and self._controls:
            run.threads = threads
            run.current = want
            run.setters = self._setters
        return _NOTHING

    @staticmethod
    def exit(changed: object = None) -> None:
        """The end of a run `enter` started: the last run of the process to end restores the
        counts BLAS had before the first began, when anything changed them. (`changed`, what
        `enter` returned, is accepted and unused: the counts to restore are process-wide.)"""
        del changed
        run = _RUN
        if run.threads:  # a thread-local write costs more than the read
            run.threads = 0
        depth = run.depth - 1
        run.depth = depth
        if depth:
            return  # another provider of this run still holds it
        shared = _SHARED
        lock = shared.lock
        lock.acquire()
        try:
            active = shared.active - 1
            shared.active = active
            if active == 0 and shared.touched:
                for set_, count in shared.saved:
                    set_(count)
                shared.touched = False
        finally:
            lock.release()


_NOTHING: list[tuple[Callable[[int], Any], int]] = []  # what enter returns (never filled)


def blas_threads_for(macs: int, threads: int) -> int:
    """How many threads share a product of `macs` multiply-adds in a session of `threads`: one
    under `BLAS_SERIAL_MACS`, else all of them (each block on one BLAS thread)."""
    return 1 if threads <= 1 or macs < BLAS_SERIAL_MACS else threads


def run_threads() -> int:
    """The thread count of the managed run in progress, with BLAS held to one thread from now
    to the run's end (each thread's products run on it alone); 0 or 1 outside such a run,
    where BLAS keeps its count. Kernels that split products themselves (`blas_matmul`, or a
    provider's own pool) ask this first."""
    run = _RUN
    if run.threads > 1 and run.current != 1:
        _SHARED.touched = True  # before the set: the last exit must restore it
        for setter in run.setters:
            setter(1)
        run.current = 1
    return run.threads


def blas_matmul(a: Any, b: Any, out: Any = None) -> Any:
    """np.matmul(a, b, out=out): inside a managed run of a session with threads, on one BLAS
    thread, split between the caller and the helpers when large (see the module docstring);
    elsewhere plain np.matmul."""
    budget = run_threads()
    if budget <= 1:
        return np.matmul(a, b, out=out)
    sa = a.shape
    sb = b.shape
    if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2]:  # vectors; shape errors are numpy's
        return np.matmul(a, b, out=out)
    m = sa[-2]
    n = sb[-1]
    lead = sa[:-2]
    if a.size * (b.size // max(sa[-1], 1)) < BLAS_SERIAL_MACS:  # >= the multiply-adds
        return np.matmul(a, b, out=out)  # small: skips np.broadcast_shapes (~20 us at 4-D)
    if lead != sb[:-2]:
        try:
            lead = np.broadcast_shapes(lead, sb[:-2])
        except ValueError:
            return np.matmul(a, b, out=out)
    batch = 1
    for d in lead:
        batch *= d
    threads = blas_threads_for(batch * m * sa[-1] * n, budget)
    dt = a.dtype
    if threads == 1 or b.dtype != dt or dt not in _SPLIT_DTYPES or max(m, n) < 2 * _ALIGN:
        return np.matmul(a, b, out=out)
    if out is None:
        out = np.empty((*lead, m, n), dt)
    elif (
        out.shape != (*lead, m, n)
        or out.dtype != dt
        or np.may_share_memory(out, a)
        or np.may_share_memory(out, b)
    ):  # numpy's errors, casts and buffering
        return np.matmul(a, b, out=out)
    pieces = threads * BLOCKS_PER_THREAD
    if n >= m:
        step = -(-n // pieces)
        step += -step % _ALIGN
        parts = [(a, b[..., j : j + step], out[..., j : j + step]) for j in range(0, n, step)]
    else:
        step = -(-m // pieces)
        step += -step % _ALIGN
        parts = [(a[..., i : i + step, :], b, out[..., i : i + step, :]) for i in range(0, m, step)]
    job = _Job(parts)
    _HELPERS.post(job, threads - 1)
    job.call()
    if job.error is not None:
        raise job.error
    return out
