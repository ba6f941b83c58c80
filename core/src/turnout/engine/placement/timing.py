"""The timing pass: real kernels and real copies, at the session's shapes, within a budget.

Each candidate claim (one node, or a fused group) is built the way the executor builds it
(`compile_partition` over that claim alone) and run on inputs of the node's static shapes:
random data of the value's dtype, except values the graph holds (initializers: shapes,
indices, weights), which are the graph's own. One untimed call warms the kernel (a compiler's
first call, a device program's upload); then timed calls until five are done or the
candidate's share of the budget is spent; the median counts. A device provider's stream is
synchronized after each call, so its time is the work's, not the enqueueing's. Host
candidates are timed first; a device candidate whose warm-up alone is `HOPELESS` times slower
than the host's best is not repeated.

Copies: each device provider's data transfer moves, both ways, each distinct number of bytes
that a value crossing its device boundary has (three calls, the fastest: a copy's other calls
differ only by what interrupted them).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout.engine.executor.build import compile_partition
from turnout.engine.partition import Assignment, GraphPartition
from turnout.graph.ir import Graph, Node
from turnout.sdk.provider import CPU, Capability, ExecutionProvider

__all__ = [
    "SHAPE_UNKNOWN",
    "Candidate",
    "Clock",
    "CopyTimes",
    "static_shape",
    "time_candidates",
    "time_copies",
]

REPEATS = 5
"""Timed calls per candidate at most (after the warm-up call)."""
COPY_REPEATS = 3
SHAPE_UNKNOWN = "shape unknown at creation"
HOPELESS = 3
"""A device candidate whose warm-up call takes this many times the best host time of its
nodes is timed by that call alone: it cannot win, and repeating it only spends the budget."""
HOPELESS_MIN_S = 1e-3
"""...when that call takes at least this long (a first call of microseconds is noise)."""


@dataclass
class Candidate:
    """One provider's claim on a node: alone, or in a fused group with `nodes`.

    `seconds`: the median time of the claim's kernel (the whole group's), None when it was
    not timed; `note` then says why ("budget", "shape unknown", the kernel's error)."""

    provider: str
    nodes: tuple[str, ...]
    group: str | None
    cap: Capability
    seconds: float | None = None
    runs: int = 0
    note: str = ""

    @property
    def key(self) -> str:
        """The candidate's name in the placement cache."""
        return f"{self.provider}|{','.join(self.nodes)}"

    def per_node(self) -> float | None:
        """This claim's time per node it covers (a group's time shared evenly)."""
        return None if self.seconds is None else self.seconds / len(self.nodes)


class Clock:
    """The timing budget: seconds left, and how many kernels were timed against it."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.start = time.perf_counter()
        self.timed = 0

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)

    def spent(self) -> float:
        return time.perf_counter() - self.start


def static_shape(graph: Graph, name: str) -> tuple[tuple[int, ...], np.dtype[Any]] | None:
    """A tensor value's shape and dtype when both are known at creation, else None."""
    info = graph.lookup_info(name)
    if info.kind != "tensor" or info.shape is None or info.dtype is None:
        return None
    dims = [d for d in info.shape if isinstance(d, int) and d >= 0]
    if len(dims) != len(info.shape):
        return None
    return tuple(dims), info.dtype


def _sample(shape: tuple[int, ...], dtype: np.dtype[Any], rng: np.random.Generator) -> Any:
    """Random data of `dtype`: normals for floats, zeros for integers (valid as indices and
    axes of any size), coin flips for bools."""
    if dtype.kind in "fc":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return np.zeros(shape, dtype)
    raise TypeError(f"no sample data for dtype {dtype}")


def _synchronize(provider: ExecutionProvider) -> None:
    if provider.stream is not None:
        provider.stream.synchronize()


def _runnable(graph: Graph, nodes: Sequence[Node]) -> str:
    """Why a claim over `nodes` cannot be timed ("" when it can)."""
    for node in nodes:
        if node.subgraphs():
            return "control flow (not timed)"
        for x in (*node.inputs, *node.outputs):
            if x and x not in graph.initializers and static_shape(graph, x) is None:
                return SHAPE_UNKNOWN
    return ""


def time_candidates(
    graph: Graph,
    providers: Mapping[str, ExecutionProvider],
    candidates: Iterable[Candidate],
    clock: Clock,
    seed: int = 0,
) -> None:
    """Time each candidate in place (its `seconds`, `runs`, `note`), within `clock`'s budget.

    Host candidates go first: a device candidate whose warm-up call alone takes `HOPELESS`
    times the best host time of its nodes is not repeated (its warm-up is its time)."""
    todo = sorted(candidates, key=lambda c: providers[c.provider].device != CPU)
    by_name = {n.name: n for n in graph.nodes}
    every = {n.name: Assignment(n.name, n.op_type, "", "kernel", None, None) for n in graph.nodes}
    best: dict[str, float] = {}  # node -> the fastest time per node so far
    rng = np.random.default_rng(seed)
    for k, cand in enumerate(todo):
        why = _runnable(graph, [by_name[n] for n in cand.nodes])
        if why:
            cand.note = why
            continue
        left = clock.left()
        if left <= 0:
            cand.note = "budget spent"
            continue
        provider = providers[cand.provider]
        known = [best[n] for n in cand.nodes if n in best]
        hopeless = HOPELESS * sum(known) if len(known) == len(cand.nodes) else None
        try:
            part = GraphPartition(graph, [(provider, cand.cap)], every, {})
            prepared = compile_partition(part, [provider], {})
            (step,) = prepared.steps
            host = prepared.host_io.get(step.name)
            args = [
                _argument(
                    graph,
                    x,
                    prepared.constants,
                    provider,
                    host is not None and i in host.inputs,
                    rng,
                )
                for i, x in enumerate(step.inputs)
            ]
            times = _time(step.fn, args, provider, left / (len(todo) - k), hopeless)
        except Exception as e:  # a kernel that refuses sample data keeps its node by priority
            cand.note = f"not timed: {type(e).__name__}: {e}"[:200]
            continue
        cand.seconds = statistics.median(times)
        cand.runs = len(times)
        if cand.runs == 1 and hopeless is not None and cand.seconds > max(hopeless, HOPELESS_MIN_S):
            cand.note = f"warm-up call only: over {HOPELESS}x the fastest"
        per_node = cand.seconds / len(cand.nodes)
        for n in cand.nodes:
            best[n] = min(best.get(n, per_node), per_node)
        clock.timed += 1


def _argument(
    graph: Graph,
    name: str,
    constants: Mapping[str, Any],
    provider: ExecutionProvider,
    on_host: bool,
    rng: np.random.Generator,
) -> Any:
    """The value a timed kernel reads for input `name`: the graph's own, else sample data;
    on the provider's device unless the kernel reads it on the host."""
    if not name:
        return None
    value = constants.get(name)
    if value is None:
        known = static_shape(graph, name)
        assert known is not None
        value = _sample(*known, rng)
    if provider.device == CPU or on_host or not isinstance(value, np.ndarray):
        return value
    return provider.data_transfer.to_device(value, provider.device)


def _time(
    fn: Callable[..., Any],
    args: Sequence[Any],
    provider: ExecutionProvider,
    share: float,
    hopeless: float | None,
) -> list[float]:
    """One warm-up call, then timed calls (at least one, at most `REPEATS`, while the time
    spent stays under `share`), each waited for on the provider's stream. A warm-up slower
    than `hopeless` is the only time taken."""
    provider.on_run_start()
    try:
        begin = time.perf_counter()
        fn(*args)
        _synchronize(provider)
        warm = time.perf_counter() - begin
        if hopeless is not None and warm > max(hopeless, HOPELESS_MIN_S):
            return [warm]
        times: list[float] = []
        while len(times) < REPEATS and (not times or time.perf_counter() - begin < share):
            t0 = time.perf_counter()
            fn(*args)
            _synchronize(provider)
            times.append(time.perf_counter() - t0)
        return times
    finally:
        provider.on_run_end()


@dataclass
class CopyTimes:
    """Measured copy times per (device, direction, bytes); direction is "up" (host to the
    device) or "down" (device to host)."""

    seconds: dict[str, float]

    @staticmethod
    def key(device: str, direction: str, nbytes: int) -> str:
        return f"{device}|{direction}|{nbytes}"

    def get(self, device: str, direction: str, nbytes: int) -> float:
        """The measured time, or one scaled from the nearest measured size (0 when none)."""
        exact = self.seconds.get(self.key(device, direction, nbytes))
        if exact is not None:
            return exact
        prefix = f"{device}|{direction}|"
        sizes = [
            (int(k[len(prefix) :]), v) for k, v in self.seconds.items() if k.startswith(prefix)
        ]
        if not sizes:
            return 0.0
        size, secs = min(sizes, key=lambda sv: abs(sv[0] - nbytes))
        return secs * max(nbytes, 1) / max(size, 1) if nbytes > size else secs


def time_copies(
    providers: Iterable[ExecutionProvider], sizes: Iterable[int], clock: Clock
) -> CopyTimes:
    """Each device provider's transfer, both ways, for each byte count in `sizes`."""
    out: dict[str, float] = {}
    wanted = sorted(set(sizes))
    for provider in providers:
        if provider.device == CPU or provider.data_transfer is None:
            continue
        device = str(provider.device)
        for nbytes in wanted:
            if clock.left() <= 0:
                break
            host = np.zeros(max(nbytes // 4, 1), np.float32)
            up: list[float] = []
            down: list[float] = []
            provider.on_run_start()
            try:
                for _ in range(COPY_REPEATS):
                    t0 = time.perf_counter()
                    on_device = provider.data_transfer.to_device(host, provider.device)
                    _synchronize(provider)
                    t1 = time.perf_counter()
                    provider.data_transfer.to_host(on_device)
                    t2 = time.perf_counter()
                    up.append(t1 - t0)
                    down.append(t2 - t1)
            finally:
                provider.on_run_end()
            # the fastest: a copy of fixed bytes varies only by what interrupts it (two of
            # three preempted on a busy machine made the median cost a zero-copy transfer ms)
            out[CopyTimes.key(device, "up", nbytes)] = min(up)
            out[CopyTimes.key(device, "down", nbytes)] = min(down)
    return CopyTimes(out)
