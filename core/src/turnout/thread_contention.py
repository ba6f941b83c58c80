"""Notices when a multi-threaded call loses to its serial time, and keeps calls serial a while.

A BLAS call on two threads waits for both. When another process holds the second core, the
helper thread is descheduled and the call waits for it: measured on the 2-core dev machine with
a busy process on the other core, 2-thread OpenBLAS GEMMs of 1.7 ms (serial) took 30-70 ms.
onnxruntime's pool lets the caller take the work a late thread has not started; OpenBLAS cannot.
So the caller measures instead: each product shape first runs serial once (its serial time);
later multi-threaded calls that take longer than that mean the other core is taken, and every
call runs serial for a backoff time (doubling while calls keep losing, so a loaded machine pays
one late call per backoff, not one per call); a call that wins resets the backoff.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

__all__ = ["StallGuard"]


class StallGuard:
    """The decision (`threads_for`) and the evidence (`record`) for one process's BLAS calls."""

    FIRST_BACKOFF_S = 0.05
    MAX_BACKOFF_S = 2.0
    WIN = 0.8
    """A multi-threaded call under this fraction of the serial time counts as a win."""
    MAX_SHAPES = 4096
    """Serial times kept (dynamic shapes would grow the table without bound)."""

    def __init__(self) -> None:
        self.serial_best: dict[Hashable, float] = {}
        self.serial_until = 0.0
        self.backoff = self.FIRST_BACKOFF_S

    def threads_for(self, key: Hashable, threads: int) -> int:
        """`threads`, or 1 while the shape's serial time is unknown or calls are held serial."""
        if key not in self.serial_best or time.perf_counter() < self.serial_until:
            return 1
        return threads

    def record(self, key: Hashable, threads: int, elapsed: float) -> None:
        """One call's time: a serial one sets the shape's serial time (the best seen); a
        multi-threaded one slower than that holds calls serial for the backoff."""
        best = self.serial_best.get(key)
        if threads == 1:
            if best is None or elapsed < best:
                if best is None and len(self.serial_best) >= self.MAX_SHAPES:
                    self.serial_best.clear()
                self.serial_best[key] = elapsed
        elif best is not None:
            if elapsed > best:
                self.serial_until = time.perf_counter() + self.backoff
                self.backoff = min(2 * self.backoff, self.MAX_BACKOFF_S)
            elif elapsed < self.WIN * best:
                self.backoff = self.FIRST_BACKOFF_S

    def held_serial(self) -> bool:
        """Whether a recent multi-threaded call lost (other parallel launches may ask too)."""
        return time.perf_counter() < self.serial_until
