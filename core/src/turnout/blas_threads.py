"""BLAS's thread count held to a session's `intra_op_num_threads` while it runs.

numpy's BLAS starts as many threads as there are cores. A session asked for one thread must not
run its GEMMs on two (onnxruntime's CPU provider honours the count), and a numba session's
threads must not fight BLAS's for the cores. threadpoolctl (optional: the `threads` extra) can
set the count; its `limit()` context re-queries every library on each call (about 5.5 µs, half
of a tiny model's run), so this keeps the library controllers found once and makes two ctypes
calls per run (0.5 µs to read, 1 µs to set, only when the count differs).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BlasThreads"]


class BlasThreads:
    """Sets BLAS to `threads` in `enter()` and restores the previous counts in `exit()`.

    Without threadpoolctl, or with no BLAS loaded, both are no-ops.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._libs: list[Any] = []
        try:
            import numpy  # noqa: F401 - loads the BLAS that threadpoolctl must find
            from threadpoolctl import ThreadpoolController
        except ImportError:
            return
        self._libs = list(ThreadpoolController().select(user_api="blas").lib_controllers)

    def enter(self) -> list[tuple[Any, int]]:
        """Limit every BLAS library; returns what `exit` must restore."""
        changed = []
        for lib in self._libs:
            current = lib.get_num_threads()
            if current != self.threads:
                lib.set_num_threads(self.threads)
                changed.append((lib, current))
        return changed

    @staticmethod
    def exit(changed: list[tuple[Any, int]]) -> None:
        for lib, count in changed:
            lib.set_num_threads(count)
