"""What a batch run reports at the end: rows, time, and each worker's share and rate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["BatchSummary"]


@dataclass(frozen=True)
class BatchSummary:
    """`rows` scored in `seconds` (from submitting the work to the closed output file; Ray's
    own startup is `startup_seconds`, and the first rows came back after `first_rows_seconds`:
    the workers' start and model load), and the rows each worker ran. A worker's rate is its
    rows over the run's time: the workers' rates add up to the run's."""

    rows: int
    seconds: float
    startup_seconds: float
    first_rows_seconds: float
    per_worker: Mapping[str, int] = field(default_factory=dict)

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
        for worker, n in sorted(self.per_worker.items()):
            rate = n / self.seconds if self.seconds > 0 else float("inf")
            out.append(f"worker {worker}: {n} rows, {rate:,.0f} rows/s")
        return out
