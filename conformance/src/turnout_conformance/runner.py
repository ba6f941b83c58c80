"""Run cases in worker processes: per-case timeout, crashes and hangs classified, workers restarted.

The parent collects the cases once and forks `-j` workers (on Linux), so workers share the cases
and any provider registered in-process; it sends (provider, mode, case index) and reads back the
raw status. A worker that dies mid-case is a `crash` for that case (with the signal or exit code);
one that exceeds the timeout is killed (`timeout`). Either way a fresh worker takes its place.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import signal
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .attribution import culprit_of_error, culprit_of_wrong_outputs, placement
from .cases import Case, collect_cases

__all__ = ["CPU", "MODES", "Outcome", "Result", "Runner", "Task", "execute_case"]

CPU = "CPUExecutionProvider"
MODES = ("isolated", "fallback")
MAX_MESSAGE = 4000

Task = tuple[str, str, int]
"""(provider name, mode, index into the case list)."""


@dataclass
class Result:
    """The outcome of one case on one provider."""

    provider: str
    case: str
    kind: str
    op: str
    status: str
    seconds: float
    message: str = ""
    expected: str | None = None  # the expected-failure reason, when the case is listed
    placement: str = ""  # how many of the case's nodes the provider ran: all, some, none, ""
    culprit: str = ""  # the provider that ran the failing node ("" when passed or unknown)
    expected_from: str | None = None  # whose reviewed list `expected` is from, when inherited

    @property
    def claimed(self) -> bool:
        """The provider ran every node of the case (in isolated mode: declined none)."""
        return self.placement == "all"

    @property
    def exercised(self) -> bool:
        """The provider ran at least one node of the case (unknown counts: it failed there)."""
        return self.placement != "none"

    def label(self) -> str:
        """The status as reports show it: an inherited expected failure says from whom."""
        if self.status == "xfail" and self.expected_from:
            return f"expected failure (inherited from {self.expected_from}: {self.expected})"
        return self.status

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label(), "exercised": self.exercised}


class Outcome(NamedTuple):
    """What running a case in this process found; `placement` and `culprit` as in `Result`."""

    status: str
    message: str
    placement: str = ""
    culprit: str = ""


def execute_case(
    case: Case,
    provider: str,
    mode: str,
    on_placement: Callable[[str], None] | None = None,
) -> Outcome:
    """Run `case` in this process: status "passed" | "failed" | "unclaimed", and in fallback
    mode where the provider's nodes ran and whose node failed. `on_placement` hears the
    placement as soon as the session exists (before a run that may crash)."""
    from turnout import InferenceSession, SessionOptions
    from turnout.graph import errors
    from turnout.sdk.provider_options import CPU_NUMPY_ONLY_KEY

    so = SessionOptions()
    # the CPU provider behind the one under test is the numpy reference, never a host provider
    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")
    if mode == "isolated":
        so.fallback = "error"
        providers = [provider]
    elif mode == "fallback":
        so.fallback = "allow"
        providers = [provider] if provider == CPU else [provider, CPU]
    else:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    fallback = mode == "fallback" and provider != CPU
    names = (provider, CPU)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            sess = InferenceSession(case.load_model(), so, providers=providers)
        except errors.FallbackError as e:
            if mode == "isolated":
                return Outcome("unclaimed", _clip(_declines(str(e))), "none")
            return Outcome("failed", _clip(f"session creation: {type(e).__name__}: {e}"))
        except errors.NotImplemented as e:  # no provider at all can run some node
            if mode == "isolated" and provider != CPU:
                return Outcome("unclaimed", _clip(str(e)), "none")
            message = _clip(f"session creation: {type(e).__name__}: {e}")
            # the CPU provider is the last resort: a node nobody runs is a gap of its own
            return Outcome(
                "failed", message, "none" if fallback else "all", CPU if fallback else ""
            )
        except Exception as e:
            message = f"session creation: {type(e).__name__}: {e}"
            who = culprit_of_error(message, None, names) if fallback else ""
            return Outcome("failed", _clip(message), "all" if not fallback else "", who)
        report = sess.partition_report() if fallback else None
        where = placement(report, provider) if report is not None else "all"
        if on_placement is not None:
            on_placement(where)
        step, feeds = "loading data", {}
        try:
            for i, (inputs, expected) in enumerate(case.load_data()):
                step = f"data set {i}"
                feeds = _feeds(sess, inputs)
                got = sess.run(None, feeds)
                case.check(expected, got)
        except AssertionError as e:
            message = _clip(f"wrong outputs ({step}): {str(e).strip()}")
            if report is None:
                return Outcome("failed", message, where)
            if where != "some":
                return Outcome("failed", message, where, provider if where == "all" else CPU)
            return Outcome(
                "failed",
                message,
                where,
                culprit_of_wrong_outputs(case, report, provider, CPU, feeds),
            )
        except Exception as e:
            message = f"run ({step}): {type(e).__name__}: {e}"
            who = ""
            if report is not None:
                who = culprit_of_error(message, report, names) or (
                    CPU if where == "none" else provider
                )
            return Outcome("failed", _clip(message), where, who)
    return Outcome("passed", "", where)


def _feeds(sess: Any, inputs: Any) -> dict[str, Any]:
    """Positional inputs map to the non-initializer graph inputs, as onnx's backend runner does;
    no inputs at all (light models) means zeros of the declared shape."""
    if isinstance(inputs, dict):
        return dict(inputs)
    args = sess.get_inputs()
    if not inputs and args:
        return {
            a.name: np.zeros([d if isinstance(d, int) else 1 for d in a.shape], np.float32)
            for a in args
        }
    # numpy scalars become 0-d arrays, as onnxruntime's backend runner passes them
    return {a.name: np.asarray(v) if isinstance(v, np.generic) else v for a, v in zip(args, inputs)}


def _declines(message: str) -> str:
    """The per-node decline lines of a FallbackError (what the provider said, node by node)."""
    lines = [ln.strip() for ln in message.splitlines()[1:] if ln.strip()]
    return "declined: " + "; ".join(lines) if lines else message


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 15] + " ... (clipped)"


# --------------------------------------------------------------------------------------------
# Worker processes

_CASES: Sequence[Case] = ()


def _worker_main(
    conn: mpc.Connection, spec: tuple[tuple[str, ...], str | None] | None, fault_log: str
) -> None:
    global _CASES
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    log = open(fault_log, "w")  # noqa: SIM115 - open for the life of the process
    faulthandler.enable(file=log)  # a crash leaves its Python stack here for the parent
    if spec is not None:  # spawned, not forked: collect the same cases again
        _CASES = collect_cases(*spec)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        provider, mode, idx = msg
        t0 = time.perf_counter()
        try:
            out = execute_case(_CASES[idx], provider, mode, lambda p: conn.send(("placement", p)))
        except BaseException as e:  # e.g. SystemExit from a kernel: still one case's failure
            out = Outcome("failed", _clip(f"{type(e).__name__}: {e}"))
        conn.send(("result", out, time.perf_counter() - t0))


@dataclass
class _Worker:
    proc: Any
    conn: mpc.Connection
    fault_log: str
    task: int | None = None
    started: float = 0.0
    placement: str = ""  # of the running task, once its session exists


class Runner:
    """Runs tasks over `jobs` worker processes with a per-case `timeout` in seconds.

    `spec` (kinds, pattern) lets spawned workers re-collect the cases where fork is unavailable.
    """

    def __init__(
        self,
        cases: Sequence[Case],
        jobs: int = 1,
        timeout: float = 60.0,
        spec: tuple[tuple[str, ...], str | None] | None = None,
    ) -> None:
        self.cases = cases
        self.jobs = max(1, jobs)
        self.timeout = timeout
        methods = mp.get_all_start_methods()
        self._ctx: Any = mp.get_context("fork" if "fork" in methods else "spawn")
        self._spec = None if "fork" in methods else spec

    def _start(self) -> _Worker:
        global _CASES
        _CASES = self.cases  # inherited by forked workers
        parent, child = self._ctx.Pipe(duplex=True)
        fd, fault_log = tempfile.mkstemp(prefix="turnout-conformance-", suffix=".log")
        os.close(fd)
        proc = self._ctx.Process(
            target=_worker_main, args=(child, self._spec, fault_log), daemon=True
        )
        with warnings.catch_warnings():
            # Python >= 3.12 warns when forking a process with threads (BLAS pools): the
            # workers only run cases, and fork is what lets them share the collected cases.
            warnings.filterwarnings("ignore", ".*fork", DeprecationWarning)
            proc.start()
        child.close()
        return _Worker(proc, parent, fault_log)

    def run(
        self, tasks: Sequence[Task], on_result: Callable[[int, Result], None] | None = None
    ) -> list[Result]:
        """Run every task; `on_result(task index, raw result)` is called as each one finishes."""
        results: list[Result | None] = [None] * len(tasks)
        pending = deque(range(len(tasks)))
        workers: list[_Worker] = []

        def finish(w: _Worker, out: Outcome, seconds: float) -> None:
            assert w.task is not None
            provider, mode, idx = tasks[w.task]
            c = self.cases[idx]
            r = Result(provider, c.name, c.kind, c.op, out.status, seconds, out.message)
            r.placement = out.placement or w.placement or ("all" if mode == "isolated" else "")
            r.culprit = out.culprit or _crash_culprit(r, mode)
            results[w.task] = r
            if on_result is not None:
                on_result(w.task, r)
            w.task = None

        try:
            workers = [self._start() for _ in range(min(self.jobs, len(tasks)))]
            while True:
                for w in workers:
                    if w.task is None and pending:
                        w.task = pending.popleft()
                        w.started = time.monotonic()
                        w.placement = ""
                        w.conn.send(tasks[w.task])
                busy = [w for w in workers if w.task is not None]
                if not busy:
                    break
                wait = min(w.started + self.timeout for w in busy) - time.monotonic()
                objs: list[Any] = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
                mpc.wait(objs, timeout=max(0.0, wait))
                for i, w in enumerate(workers):
                    if w.task is None:
                        continue
                    elapsed = time.monotonic() - w.started
                    got = self._receive(w)
                    if got is not None:
                        finish(w, *got)
                    elif not w.proc.is_alive():
                        w.proc.join()
                        why = _exit_reason(w.proc.exitcode) + _crash_stack(w.fault_log)
                        finish(w, Outcome("crash", why), elapsed)
                        workers[i] = self._replace(w)
                    elif elapsed > self.timeout:
                        why = f"no result after {self.timeout:g} s; killed"
                        finish(w, Outcome("timeout", why), elapsed)
                        workers[i] = self._replace(w)
        finally:
            for w in workers:
                self._stop(w)
        return [r for r in results if r is not None]

    def _receive(self, w: _Worker) -> tuple[Outcome, float] | None:
        """The task's outcome if it has come; a placement message on the way is kept on `w`."""
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "placement":
                    w.placement = str(msg[1])
                    continue
                _, out, seconds = msg
                return Outcome(*out), float(seconds)
        except (EOFError, OSError):
            pass
        return None

    def _replace(self, w: _Worker) -> _Worker:
        w.proc.kill()
        w.proc.join()
        w.conn.close()
        _unlink(w.fault_log)
        return self._start()

    def _stop(self, w: _Worker) -> None:
        try:
            if w.proc.is_alive() and w.task is None:
                w.conn.send(None)
                w.proc.join(timeout=5)
        except (OSError, BrokenPipeError):
            pass
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join()
        w.conn.close()
        _unlink(w.fault_log)


def _crash_culprit(r: Result, mode: str) -> str:
    """A crash or timeout in fallback mode is the CPU provider's only when it ran every node."""
    if mode != "fallback" or r.provider == CPU or r.status not in ("crash", "timeout"):
        return ""
    return CPU if r.placement == "none" else r.provider


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _crash_stack(path: str, frames: int = 8) -> str:
    """The innermost frames of the crashed thread, from the worker's faulthandler log."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("Current thread")), None)
    if start is None:
        return ""
    stack = [ln.strip() for ln in lines[start + 1 :] if ln.strip().startswith("File ")]
    return "\n" + "\n".join(stack[:frames]) if stack else ""


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"worker killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with status {code}"
