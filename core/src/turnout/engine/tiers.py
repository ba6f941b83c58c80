"""Tiered kernels: a session is ready on the numpy kernels while its compiled tier builds.

The providers that serve `CPUExecutionProvider` requests (turnout-numba) compile kernels, which
takes seconds on an empty kernel cache and still costs numba's import and runtime start on a
warm one. A CPU session therefore places its nodes on the numpy kernels first and builds the
placement with the host providers in a background thread; the session adopts that placement at
the start of a later run (never inside one). `session.turnout.wait_for_compiled_tier` = "1"
(or `TURNOUT_WAIT_FOR_COMPILED_TIER=1`) builds it at creation instead, as before; compiled
models (`turnout compile`) and sessions that keep the numpy kernels have one tier only.

Processes and threads: a build belongs to the process that started it; a child forked while
it ran starts its own at its next run. At interpreter exit, running builds stop at their next
checkpoint (between kernels) and are joined, so no compiler thread outlives the interpreter.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from turnout.graph.logs import logger

__all__ = [
    "TIER_HOLD_S",
    "WAIT_ENV",
    "WAIT_KEY",
    "BackgroundBuild",
    "BuildCancelled",
    "TierState",
    "log_failure",
    "stop_all_builds",
]

WAIT_KEY = "session.turnout.wait_for_compiled_tier"
"""Session config entry: "1" builds the compiled tier at session creation (benchmarks, servers
that prefer a slower start to a slower first run); "0" (the default) builds it in the
background."""
WAIT_ENV = "TURNOUT_WAIT_FOR_COMPILED_TIER"
"""The same switch for a whole process (the session config entry wins when both are set)."""

TIER_HOLD_S = 0.5
"""How long a compiled-tier build holds back after creation unless the first run ends sooner:
the first result comes from the numpy kernels alone, without a compiler competing for the
interpreter lock."""

T = TypeVar("T")


class BuildCancelled(Exception):
    """A background build stopped at a checkpoint: the interpreter is exiting, or the session
    was placed again."""


@dataclass
class TierState:
    """Which kernels a session runs on, for its reports.

    `tier` is "numpy" (the numpy kernels, while the compiled tier builds or after it failed)
    or "compiled" (the host providers' kernels); `since_run` is the number of runs before it
    (0: from the first run); `hosts` are the providers of the compiled tier; `building` is
    whether the compiled tier is still being built; `error` says why it could not be.
    """

    tier: str
    since_run: int
    hosts: list[str]
    building: bool = False
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        hosts = ", ".join(self.hosts)
        if self.tier == "compiled":
            return f"compiled tier ({hosts}) since run {self.since_run}"
        if self.building:
            return (
                f"numpy tier since run {self.since_run}; the compiled tier ({hosts}) is "
                "building in the background and takes over at a run boundary"
            )
        why = f": {self.error}" if self.error else ""
        return f"numpy tier since run {self.since_run}; no compiled tier{why}"


class BackgroundBuild(Generic[T]):
    """One build in a daemon thread of this process: its result, its error, or not yet.

    `build` receives a `checkpoint` to call between units of work; it raises `BuildCancelled`
    once `cancel()` was called (or the interpreter exits). The thread holds back until
    `release()` or for `hold` seconds, whichever comes first: a session releases it when its
    first run ends, so that run does not share the interpreter lock with a compiler.
    """

    def __init__(
        self, build: Callable[[Callable[[], None]], T], label: str, hold: float = 0.0
    ) -> None:
        self.label = label
        self.pid = os.getpid()
        self._build = build
        self._hold = hold
        self._released = threading.Event()
        self._done = threading.Event()
        self._cancelled = threading.Event()
        self._result: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"turnout-tier {label}", daemon=True)
        _RUNNING.add(self)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._released.wait(self._hold)
            self._checkpoint()
            self._result = self._build(self._checkpoint)
        except BaseException as e:  # handed to the session at its next run boundary
            self._error = e
        finally:
            self._done.set()

    def _checkpoint(self) -> None:
        if self._cancelled.is_set():
            raise BuildCancelled(f"{self.label}: compiled tier build cancelled")

    @property
    def orphaned(self) -> bool:
        """Started by another process (this one is a fork): its thread does not run here."""
        return self.pid != os.getpid()

    def done(self) -> bool:
        return self._done.is_set() and not self.orphaned

    def release(self) -> None:
        """Start building now, if the thread still holds back."""
        self._released.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Start building now and block until the build finished (True) or `timeout` seconds
        passed (False)."""
        self.release()
        return not self.orphaned and self._done.wait(timeout)

    def result(self) -> T:
        """The built value; re-raises the build's error."""
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self, join: bool = False) -> None:
        """Stop at the next checkpoint; with `join`, wait for the thread to end."""
        self._cancelled.set()
        self._released.set()
        if join and not self.orphaned and self._thread.is_alive():
            self._thread.join()


_RUNNING: weakref.WeakSet[BackgroundBuild[Any]] = weakref.WeakSet()


def stop_all_builds() -> None:
    """Stop every running build at its next checkpoint and wait for its thread to end: at
    interpreter exit (before it finalizes), and between tests."""
    for build in list(_RUNNING):
        build.cancel(join=True)


atexit.register(stop_all_builds)


def log_failure(label: str, error: BaseException) -> str:
    """The one-line reason a compiled tier could not be built, logged once."""
    reason = f"{type(error).__name__}: {error}"
    logger.warning("%s: compiled tier not built, staying on the numpy kernels: %s", label, reason)
    return reason
