"""Notices when a multi-threaded call loses to its serial time, and keeps calls serial a while.

A BLAS call on two threads waits for both. When another process holds the second core, the
helper thread is descheduled and the call waits for it: measured on the 2-core dev machine with
a busy process on the other core, 2-thread OpenBLAS GEMMs of 1.7 ms (serial) took 30-70 ms.
onnxruntime's pool lets the caller take the work a late thread has not started; OpenBLAS cannot.
So the caller measures instead: each product shape's second call runs serial (its serial
time; the first keeps the threads, so that a first run is not slowed); later multi-threaded
calls that take longer than that mean the other core is taken, and every call runs serial for a
backoff time, four times longer after each loss (a loaded machine pays one late call per
backoff, not one per call: a late call costs 10-100 ms, a run of resnet18_like 50 ms, so the
backoff must outgrow the runs quickly), four times shorter after a win.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

__all__ = ["StallGuard"]


class StallGuard:
    """The decision (`threads_for`) and the evidence (`record`) for one process's BLAS calls."""

    FIRST_BACKOFF_S = 0.25
    MAX_BACKOFF_S = 16.0
    FACTOR = 4.0
    WIN = 0.8
    """A multi-threaded call under this fraction of the serial time counts as a win."""
    MAX_SHAPES = 4096
    """Serial times kept (dynamic shapes would grow the table without bound)."""

    def __init__(self) -> None:
        self.serial_best: dict[Hashable, float | None] = {}  # None: seen, not yet serial
        self.serial_until = 0.0
        self.backoff = self.FIRST_BACKOFF_S

    def threads_for(self, key: Hashable, threads: int) -> int:
        """`threads` on a shape's first call (a first run is not slowed), 1 on its second (the
        serial time) and while calls are held serial, `threads` otherwise."""
        if time.perf_counter() < self.serial_until:
            return 1
        return 1 if key in self.serial_best and self.serial_best[key] is None else threads

    def record(self, key: Hashable, threads: int, elapsed: float) -> None:
        """One call's time: a serial one sets the shape's serial time (the best seen); a
        multi-threaded one slower than that holds calls serial for the backoff."""
        if key not in self.serial_best and len(self.serial_best) >= self.MAX_SHAPES:
            self.serial_best.clear()
        best = self.serial_best.get(key)
        if threads == 1:
            if best is None or elapsed < best:
                self.serial_best[key] = elapsed
        elif best is None:
            self.serial_best.setdefault(key, None)  # seen: its next call runs serial
        elif elapsed > best:
            self.serial_until = time.perf_counter() + self.backoff
            self.backoff = min(self.FACTOR * self.backoff, self.MAX_BACKOFF_S)
        elif elapsed < self.WIN * best:
            self.backoff = max(self.backoff / self.FACTOR, self.FIRST_BACKOFF_S)

    def held_serial(self) -> bool:
        """Whether a recent multi-threaded call lost (other parallel launches may ask too)."""
        return time.perf_counter() < self.serial_until
