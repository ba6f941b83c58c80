"""The error a failed batch raises: it names the rows, so no failure is anonymous or dropped."""

from __future__ import annotations

from ..errors import RuntimeException

__all__ = ["BatchError"]


class BatchError(RuntimeException):
    """A batch failed: rows `first_row` to `last_row` (row ids, inclusive) and the error.

    Raised in a Ray worker and re-raised on the driver; it carries the original error as text
    (`error`), since the exception object itself may not survive pickling across processes.
    """

    def __init__(self, first_row: int, last_row: int, error: str) -> None:
        super().__init__(f"rows {first_row}-{last_row} failed: {error}")
        self.first_row = first_row
        self.last_row = last_row
        self.error = error

    def __reduce__(self) -> tuple[type[BatchError], tuple[int, int, str]]:
        return type(self), (self.first_row, self.last_row, self.error)
