"""Progress while a run goes: a rich bar with pass/fail counts when rich is installed and the
output is a terminal, plain text lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from .runner import Result

__all__ = ["Progress", "make_progress"]


class Progress:
    """Counts results as they come; subclasses decide how to show them."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.counts: dict[str, int] = {}

    def update(self, result: Result) -> None:
        self.done += 1
        self.counts[result.status] = self.counts.get(result.status, 0) + 1
        self._show(result)

    def close(self) -> None:
        """Called once when the run ends."""

    def _show(self, result: Result) -> None:
        """Called after each result."""

    def text(self) -> str:
        order = ("passed", "failed", "unclaimed", "crash", "timeout", "xfail", "xpass")
        return " ".join(f"{k} {self.counts[k]}" for k in order if self.counts.get(k))


class _Silent(Progress):
    pass


class _Plain(Progress):
    """A line every few seconds (or in place on a terminal), and one for each unexpected result."""

    def __init__(self, total: int, stream: TextIO) -> None:
        super().__init__(total)
        self.stream = stream
        self.tty = stream.isatty()
        self._last = 0.0

    def _show(self, result: Result) -> None:
        if result.status in ("failed", "crash", "timeout", "xpass"):
            self._line(f"{result.status.upper()} {result.provider} {result.case}")
        now = time.monotonic()
        if self.done == self.total or now - self._last > (0.2 if self.tty else 5.0):
            self._last = now
            status = f"[{self.done}/{self.total}] {self.text()}"
            if self.tty:
                self.stream.write("\r" + status + "\x1b[K")
                self.stream.flush()
            else:
                self._line(status)

    def _line(self, text: str) -> None:
        self.stream.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


class _Rich(Progress):
    def __init__(self, total: int, stream: TextIO) -> None:
        super().__init__(total)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar: Any = RichProgress(
            TextColumn("conformance"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[counts]}"),
            console=Console(file=stream),
            transient=False,
        )
        self._task = self._bar.add_task("cases", total=total, counts="")
        self._bar.start()

    def _show(self, result: Result) -> None:
        if result.status in ("failed", "crash", "timeout", "xpass"):
            self._bar.console.print(f"{result.status.upper()} {result.provider} {result.case}")
        self._bar.update(self._task, advance=1, counts=self.text())

    def close(self) -> None:
        self._bar.stop()


def make_progress(total: int, enabled: bool = True, stream: TextIO | None = None) -> Progress:
    """The best progress display available for `stream` (stderr by default)."""
    out = stream if stream is not None else sys.stderr
    if not enabled:
        return _Silent(total)
    if out.isatty():
        try:
            return _Rich(total, out)
        except ImportError:
            pass
    return _Plain(total, out)
