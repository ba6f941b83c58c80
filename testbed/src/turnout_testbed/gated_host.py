"""A host provider whose kernel builds wait on a gate, for tests of the background compiled
tier: the build takes as long as the test wants (a slow compiler), can be made to fail, and
says when it has started.

`serving_cpu(gate, stop_builds)` makes this host the only provider that serves CPU requests
while it is entered, and puts the others back after (calling `stop_builds` first, the engine's
`stop_all_builds`, so no build reaches the next test's host; the testbed does not import the
engine).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import turnout
from turnout.sdk import plugins
from turnout.sdk.provider import (
    Capability,
    Decline,
    ExecutionProvider,
    KernelDef,
    KernelNode,
    ProviderFactory,
)

__all__ = ["BUILD_TIMEOUT", "HOST", "Gate", "SlowHostFactory", "serving_cpu"]

HOST = "SlowHostExecutionProvider"
BUILD_TIMEOUT = 60  # seconds a build waits for its gate before it fails instead of hanging


class Gate:
    """`entered` is set when a build reaches the host's kernel; the build waits for `open`,
    then raises if `fail` is set, else counts itself in `built`. The built kernel counts its
    calls in `calls` and raises while `fail_calls` is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        self.built = 0
        self.fail = False
        self.calls = 0
        self.fail_calls = False


class SlowHostProvider(ExecutionProvider):
    """Serves CPU requests for Neg; building its kernel waits for its gate."""

    name = HOST

    def __init__(self, options: dict[str, Any], gate: Gate) -> None:
        super().__init__(options)
        self.gate = gate

    def _get_capability(self, graph: Any) -> tuple[list[Capability], list[Decline]]:
        claims, declines = [], []
        for node in graph.unassigned_nodes():
            if node.op_type != "Neg":
                declines.append(Decline(node.name, "slow host: Neg only"))
                continue
            claims.append(Capability((node.name,), KernelDef("Neg", "", 1, self._build_neg)))
        return claims, declines

    def _build_neg(self, kn: KernelNode) -> Any:
        self.gate.entered.set()
        if not self.gate.open.wait(BUILD_TIMEOUT):
            raise TimeoutError("the test never opened the gate")
        if self.gate.fail:
            raise RuntimeError("compiler crashed")
        self.gate.built += 1
        gate = self.gate

        def neg(x: Any) -> tuple[Any]:
            gate.calls += 1
            if gate.fail_calls:
                raise RuntimeError("the host's kernel failed on these inputs")
            return (np.negative(x),)

        return neg


class SlowHostFactory(ProviderFactory):
    name = HOST
    default_priority = 50
    serves_cpu_requests = True
    option_names = frozenset({"intra_op_num_threads"})

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return SlowHostProvider(options, self.gate)


@contextmanager
def serving_cpu(gate: Gate, stop_builds: Callable[[], None]) -> Iterator[None]:
    """The slow host on `gate` is the only provider serving CPU requests inside the block."""
    others = [f for f in plugins.registry.all() if f.serves_cpu_requests]
    for f in others:
        plugins.registry.unregister(f.name)
    turnout.register_provider(SlowHostFactory(gate))
    try:
        yield
    finally:
        gate.open.set()  # a build still waiting ends
        stop_builds()
        plugins.registry.unregister(HOST)
        for f in others:
            turnout.register_provider(f)
