"""What a batch run reports at the end: rows, time, and each worker's share and rate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["BatchSummary", "WorkerStats"]


@dataclass(frozen=True)
class WorkerStats:
    """One worker's share of a run: rows, and seconds spent running the model on them."""

    rows: int
    busy_seconds: float


@dataclass(frozen=True)
class BatchSummary:
    """`rows` scored in `seconds` (from submitting the work to the closed output file; Ray's
    own startup is `startup_seconds`, and the first rows came back after `first_rows_seconds`:
    the workers' start and model load), and what each worker ran. A worker's rate is its rows
    over the run's time (the workers' rates add up to the run's); its busy rate, its rows over
    the time its session ran them."""

    rows: int
    seconds: float
    startup_seconds: float
    first_rows_seconds: float
    per_worker: Mapping[str, WorkerStats] = field(default_factory=dict)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")

    def lines(self) -> list[str]:
        """The summary as printed by `turnout batch`."""
        out = [
            f"rows: {self.rows}",
            f"time: {self.seconds:.2f} s ({self.rows_per_second:,.0f} rows/s); first rows after "
            f"{self.first_rows_seconds:.2f} s; Ray startup {self.startup_seconds:.2f} s",
        ]
        for worker, stats in sorted(self.per_worker.items()):
            rate = stats.rows / self.seconds if self.seconds > 0 else float("inf")
            busy = stats.rows / stats.busy_seconds if stats.busy_seconds > 0 else float("inf")
            out.append(
                f"worker {worker}: {stats.rows} rows, {rate:,.0f} rows/s; model busy "
                f"{stats.busy_seconds:.2f} s ({busy:,.0f} rows/s while busy)"
            )
        return out
