"""Many threads running one session: the check every provider's thread-safety test uses.

`run()` on one session from many threads must give, run for run, what it gives one thread (a
provider that cannot run concurrently serializes its device work; it never crashes or mixes
runs up). `run_from_threads` counts outputs that differ bit for bit from a single-thread run of
the same feed; `benchmarks/thread_stress.py` runs it from the command line, in a process of its
own, so a crash inside a device runtime shows as a signal instead of killing the caller.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["ThreadRunResult", "run_from_threads"]


@dataclass(frozen=True)
class ThreadRunResult:
    """What `run_from_threads` saw: mismatches and errors over all runs, and the wall time."""

    threads: int
    runs: int
    mismatches: int
    errors: int
    first_error: str | None
    wall_s: float

    @property
    def clean(self) -> bool:
        return self.mismatches == 0 and self.errors == 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "runs_per_s": round(self.runs / max(self.wall_s, 1e-9), 1)}


def run_from_threads(
    session: Any,
    feeds: Sequence[Mapping[str, Any]],
    threads: int = 8,
    runs: int = 1000,
    switch_interval: float | None = None,
) -> ThreadRunResult:
    """Run `session` `runs` times in each of `threads` threads, cycling through `feeds` (thread t
    starts at feed t, so concurrent runs see different inputs), and compare every output with
    a single-thread run of the same feed. `switch_interval` (e.g. 1e-5) makes Python switch
    threads often, which turns a rare race into a frequent one."""
    expected = [session.run(None, dict(f)) for f in feeds]
    mismatches = [0] * threads
    errors: list[str] = []
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        start.wait()
        for i in range(runs):
            k = (t + i) % len(feeds)
            try:
                got = session.run(None, dict(feeds[k]))
            except Exception as e:  # counted, not raised: one bad run must not hide the rest
                errors.append(f"{type(e).__name__}: {e}")
                continue
            if not _same(got, expected[k]):
                mismatches[t] += 1

    old_interval = sys.getswitchinterval()
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    try:
        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        t0 = time.perf_counter()
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        wall = time.perf_counter() - t0
    finally:
        sys.setswitchinterval(old_interval)
    return ThreadRunResult(
        threads, threads * runs, sum(mismatches), len(errors), errors[0] if errors else None, wall
    )


def _same(got: Sequence[Any], want: Sequence[Any]) -> bool:
    return len(got) == len(want) and all(
        np.asarray(g).shape == np.asarray(w).shape and np.array_equal(g, w, equal_nan=True)
        for g, w in zip(got, want)
    )
