"""Long-lived worker processes that run fuzz cases with a timeout and a memory limit.

A case that kills its worker (segfault, abort, the memory limit hit in native code) is a
`crash`, one that runs past the timeout is a `hang`; either way the worker is replaced and the
run goes on. Workers announce each runtime before they run it, so a crash or hang names the
runtime it happened in (turnout's provider, turnout's CPU provider, or the oracle).

Workers are forked from a fork server (Linux), a process that only imports turnout and the
fuzzer: forking the caller itself is unsafe once it has threads (a pytest run that had already
run threaded tests deadlocked a forked worker on the import lock), and per-case process spawn
would cost more than most cases.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import resource
import signal
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .generate import FuzzCase

__all__ = ["Pool"]

_THREAD_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "POCL_MAX_PTHREAD_COUNT")


def _limit_memory(megabytes: int) -> None:
    if megabytes > 0:
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _worker_main(
    conn: mpc.Connection, memory_mb: int, fault_log: str, threads: int, execute_path: str
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    for var in _THREAD_VARS:  # the machine is shared: one thread per worker unless asked
        os.environ.setdefault(var, str(threads))
    log = open(fault_log, "w")  # noqa: SIM115 - open for the life of the process
    faulthandler.enable(file=log)
    _limit_memory(memory_mb)
    module, _, name = execute_path.partition(":")
    execute = getattr(importlib.import_module(module), name)

    def stage(name: str) -> None:
        conn.send(("stage", name))

    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        if msg[0] == "providers":
            from turnout import get_available_providers

            conn.send(("providers", list(get_available_providers())))
            continue
        _, case, provider = msg
        t0 = time.perf_counter()
        try:
            rec = execute(case, provider, stage)
        except BaseException as e:  # the fuzzer's own failure: still one case's result
            rec = {"outcome": "harness-error", "detail": f"{type(e).__name__}: {e}"}
        rec["seconds"] = round(time.perf_counter() - t0, 4)
        conn.send(("done", rec))


@dataclass
class _Worker:
    proc: Any
    conn: mpc.Connection
    fault_log: str
    task: tuple[FuzzCase, str] | None = None
    started: float = 0.0
    stage: str = ""


class Pool:
    """`jobs` workers; `run(tasks)` yields (case, provider, record) as results arrive."""

    def __init__(
        self,
        jobs: int = 1,
        timeout: float = 30.0,
        memory_mb: int = 4096,
        threads: int = 1,
        execute: str = "fuzz.execute:execute",
    ) -> None:
        """`execute` names the function a worker runs for each case ("module:function")."""
        self.jobs = max(1, jobs)
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.threads = threads
        self.execute = execute
        self._ctx: Any = mp.get_context("forkserver")
        # the server imports these once: every worker forked later runs this same code, even
        # one restarted while the source on disk is being edited
        self._ctx.set_forkserver_preload([execute.partition(":")[0], "turnout.api.session"])
        self._workers: list[_Worker] = []

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        fd, fault_log = tempfile.mkstemp(prefix="turnout-fuzz-", suffix=".log")
        os.close(fd)
        limits = (self.memory_mb, fault_log, self.threads)
        proc = self._ctx.Process(
            target=_worker_main, args=(child, *limits, self.execute), daemon=True
        )
        proc.start()
        child.close()
        return _Worker(proc, parent, fault_log)

    def providers(self) -> list[str]:
        """The providers turnout finds, asked in a worker (probing a device in the parent
        would make the later forks unsafe)."""
        if not self._workers:
            self._workers.append(self._start())
        w = self._workers[0]
        w.conn.send(("providers",))
        return list(w.conn.recv()[1])

    def run(
        self, tasks: Iterable[tuple[FuzzCase, str]]
    ) -> Iterator[tuple[FuzzCase, str, dict[str, Any]]]:
        pending: deque[tuple[FuzzCase, str]] = deque()
        source = iter(tasks)
        while len(self._workers) < self.jobs:
            self._workers.append(self._start())
        exhausted = False
        while True:
            for w in self._workers:
                if w.task is None and not exhausted:
                    nxt = pending.popleft() if pending else next(source, None)
                    if nxt is None:
                        exhausted = True
                        continue
                    w.task, w.started, w.stage = nxt, time.monotonic(), ""
                    w.conn.send(("case", *nxt))
            busy = [w for w in self._workers if w.task is not None]
            if not busy:
                return
            wait = min(w.started + self.timeout for w in busy) - time.monotonic()
            objs: list[Any] = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
            mpc.wait(objs, timeout=max(0.0, wait))
            for i, w in enumerate(self._workers):
                if w.task is None:
                    continue
                done = self._drain(w)
                task = w.task
                if done is not None:
                    w.task = None
                    yield task[0], task[1], done
                    continue
                elapsed = time.monotonic() - w.started
                if not w.proc.is_alive():
                    w.proc.join()
                    why = _exit_reason(w.proc.exitcode) + _crash_stack(w.fault_log)
                    rec = {"outcome": "crash", "detail": f"in {w.stage}: {why}"}
                elif elapsed > self.timeout:
                    rec = {"outcome": "hang", "detail": f"in {w.stage}: over {self.timeout:g} s"}
                else:
                    continue
                rec["seconds"] = round(elapsed, 4)
                self._workers[i] = self._replace(w)
                yield task[0], task[1], rec

    def _drain(self, w: _Worker) -> dict[str, Any] | None:
        """Read the worker's messages; the result record once it has sent one."""
        try:
            while w.conn.poll():
                kind, payload = w.conn.recv()
                if kind == "stage":
                    w.stage = payload
                elif kind == "done":
                    return dict(payload)
        except (EOFError, OSError):
            pass
        return None

    def _replace(self, w: _Worker) -> _Worker:
        w.proc.kill()
        w.proc.join()
        w.conn.close()
        _unlink(w.fault_log)
        return self._start()

    def close(self) -> None:
        for w in self._workers:
            with contextlib.suppress(OSError, BrokenPipeError):
                if w.proc.is_alive() and w.task is None:
                    w.conn.send(None)
                    w.proc.join(timeout=5)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join()
            w.conn.close()
            _unlink(w.fault_log)
        self._workers = []


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _crash_stack(path: str, frames: int = 6) -> str:
    """The innermost Python frames of the crashed thread, from the worker's faulthandler log."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    stack = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
    return ("; " + " | ".join(stack[:frames])) if stack else ""


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"
