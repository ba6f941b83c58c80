"""The first run's inputs, run once more by the compiled tier in its build thread.

Why: a compiled kernel prepares some of its work for the input shapes it meets (a convolution
whose sizes are not declared picks its path and loads or compiles that path's kernel at its
first call). Where a model's shapes are dynamic, that first call came in a user's run after the
compiled tier took over: 20-45 ms on a warm kernel cache, seconds of compiling on an empty one,
which is what tiered kernels promise never to do inside a run. The build thread therefore runs
the compiled plan once on copies of the inputs of the session's first run (the shapes the
application feeds) before the session adopts it. A compiled tier that fails on inputs the
numpy tier ran is not adopted (its error is the tier's).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout.engine.executor.plan import NO_TERMINATE, Plan, ignore_fp_errors, restore_fp_errors
from turnout.engine.run_hooks import end_run
from turnout.sdk.provider import ExecutionProvider

__all__ = ["FirstRunInputs"]

MAX_COPY_BYTES = 64 << 20
"""Inputs larger than this in all are not copied (the warm-up is skipped): a copy of a large
batch would cost the first run more than the warm-up saves."""


class FirstRunInputs:
    """Copies of the first run's inputs by name, offered once by the session, taken once by
    the build (`warm`)."""

    def __init__(self) -> None:
        self._inputs: dict[str, Any] | None = None
        self._offered = False
        self._lock = threading.Lock()

    def offer(self, names: Sequence[str], args: Sequence[Any]) -> None:
        """The inputs of a run that just ended, kept when they are the first offered and
        are host arrays of at most `MAX_COPY_BYTES` in all."""
        if self._offered:
            return
        with self._lock:
            if self._offered:
                return
            self._offered = True
            if len(names) != len(args) or not all(isinstance(a, np.ndarray) for a in args):
                return  # device values (IO binding) or a plan with outer values: not warmed
            if sum(a.nbytes for a in args) > MAX_COPY_BYTES:
                return
            self._inputs = {n: np.array(a, copy=True) for n, a in zip(names, args)}

    def warm(self, plan: Plan, providers: Sequence[ExecutionProvider]) -> None:
        """Run `plan` once on the offered inputs (nothing when none were, or when the plan
        wants others), with the providers' run hooks as a session's run has them. Its error
        is raised: the plan cannot run what the numpy tier ran."""
        with self._lock:
            inputs, self._inputs = self._inputs, None
        if inputs is None or plan.outer_names:
            return
        try:
            args = [inputs[n] for n in plan.input_names]
        except KeyError:
            return
        started = 0
        try:
            for p in providers:
                p.on_run_start()
                started += 1
            fp = ignore_fp_errors()
            try:
                plan.run(*args, NO_TERMINATE)
            finally:
                restore_fp_errors(fp)
        finally:
            end_run(providers, started)
