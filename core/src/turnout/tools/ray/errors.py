"""The error a failed batch raises: it names the rows, so no failure is anonymous or dropped."""

from __future__ import annotations

from turnout.graph.errors import Fail, RuntimeException, TurnoutError

__all__ = ["BatchError", "from_ray"]


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


def from_ray(error: BaseException) -> TurnoutError | None:
    """The turnout error behind an exception Ray raised on the driver, or None.

    Ray re-raises a worker's exception wrapped (its `cause` is the original, for a batch); an
    actor whose constructor failed (the session could not be built) reaches the driver only as
    text, whose last line names the original error.
    """
    cause = getattr(error, "cause", None)
    if isinstance(cause, TurnoutError):
        return cause
    if getattr(error, "actor_init_failed", False):
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        return Fail(f"a worker could not build its session: {lines[-1] if lines else error}")
    return None
