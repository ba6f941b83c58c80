"""The providers' run hooks around one run of a plan (a session's run, the compiled tier's
warm-up run)."""

from __future__ import annotations

from collections.abc import Sequence

from turnout.sdk.provider import ExecutionProvider

__all__ = ["end_run"]


def end_run(providers: Sequence[ExecutionProvider], started: int) -> None:
    """The run hooks' end, last started first. Every started provider ends even when one
    raises (a device's failed synchronize): one left inside its run would hold its device
    lock, or keep the CPU provider's BLAS limit nested, for every later run of the process.
    The first error is raised after all have ended."""
    error: BaseException | None = None
    for k in range(started - 1, -1, -1):
        try:
            providers[k].on_run_end()
        except BaseException as e:
            if error is None:
                error = e
    if error is not None:
        raise error
