"""The `measured` placement policy: kernels and copies timed, the cheapest whole plan chosen.

Kept apart from the package (`turnout.engine.placement`) so that a session placing by
`priority`, the default, imports none of the timing pass, the cost model or the placement
cache (about 10 ms of a fresh process's first session).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from turnout.engine.partition import GraphPartition, partition_graph
from turnout.engine.placement import cache
from turnout.engine.placement.cost import CostModel
from turnout.engine.placement.timing import (
    Candidate,
    Clock,
    CopyTimes,
    static_shape,
    time_candidates,
    time_copies,
)
from turnout.graph.ir import Graph, GraphView
from turnout.graph.logs import logger
from turnout.graph.model import infer_shapes
from turnout.sdk.provider import CPU, ExecutionProvider

__all__ = ["MeasuredPlacement", "at_shapes", "gather_candidates"]


class MeasuredPlacement:
    """Each node or fused group where the whole plan's measured time is lowest.

    `model` is the digest of the graph being placed (`cache.model_digest`), None to keep the
    times out of the cache; `timed` counts the kernels this policy timed (0 when every time
    came from the cache)."""

    name = "measured"

    def __init__(
        self,
        budget_s: float,
        model: str | None,
        at_shapes: Graph | None = None,
        prefer: str | None = None,
    ) -> None:
        """`at_shapes`: the graph with every shape a run's inputs give it (dynamic shapes):
        the candidates are timed there, and the graph being placed gets the choice. `prefer`:
        the device a node that cannot be timed goes to (a body's: its control-flow node's),
        when a provider there claims it; else priority decides."""
        self.budget_s = budget_s
        self.model = model
        self.at_shapes = at_shapes
        self.prefer = prefer
        self.timed = 0

    def for_body(self, device: Any, key: str) -> MeasuredPlacement:
        """The policy for a nested graph (`key`: its node and graph name) of a node placed
        on `device`: measured too, its untimed nodes kept on that device where they can be."""
        model = f"{self.model}/{key}" if self.model else None
        return MeasuredPlacement(self.budget_s, model, prefer=str(device))

    def place(self, placed: Graph, providers: Sequence[ExecutionProvider]) -> GraphPartition:
        started = time.perf_counter()
        graph = self.at_shapes or placed
        by_name = {p.name: p for p in providers}
        candidates = gather_candidates(graph, providers)
        known = {i.name: static_shape(graph, i.name) for i in graph.inputs}
        shapes = {k: list(v[0]) if v is not None else None for k, v in known.items()}
        key = cache.placement_key(self.model, providers, shapes) if self.model else None
        stored = cache.load(key) if key else None
        clock = Clock(self.budget_s)
        if stored is not None:
            copies = CopyTimes(dict(stored.get("copies", {})))
            _restore(candidates, stored.get("kernels", {}))
        else:
            copies = time_copies(providers, _crossing_sizes(graph, candidates, by_name), clock)
            unique, shared = _contested(candidates)
            time_candidates(graph, by_name, unique, clock)
            for dup, timed in shared:
                dup.seconds, dup.runs = timed.seconds, timed.runs
                dup.note = timed.note or f"the same kernel as {timed.provider}'s"
        self.timed = clock.timed
        model = CostModel(graph, providers, candidates, copies, self.prefer)
        plan, totals = model.best_plan()
        part = partition_graph(placed, providers, plan)
        part.policy = self
        written = None
        if key and stored is None:
            written = cache.store(key, _stored(candidates, copies))
        kernels, copy_s = model.cost(plan)
        part.placement = {
            "policy": self.name,
            "from_cache": stored is not None,
            "cache_file": str(cache.path_for(key)) if key else None,
            "cache_written": written is not None,
            "timed": clock.timed,
            "timing_s": round(clock.spent(), 6) if stored is None else 0.0,
            "place_s": round(time.perf_counter() - started, 6),
            "budget_s": self.budget_s,
            "shapes": {k: v for k, v in shapes.items() if v is not None},
            "plans": {k: v for k, v in totals.items()},
            "kernel_s": kernels,
            "copy_s": copy_s,
            "nodes": model.explain(plan),
        }
        logger.info(
            "measured placement: %d kernels timed in %.2fs (cache %s), plan %.3f ms",
            clock.timed,
            clock.spent(),
            "hit" if stored is not None else "miss",
            (kernels + copy_s) * 1e3,
        )
        return part


def at_shapes(
    model: onnx.ModelProto, graph: Graph, inputs: Mapping[str, tuple[int, ...]], max_elements: int
) -> Graph:
    """`graph` (the IR of the optimized `model`) with the shapes these input shapes give every
    value: the model's inputs fixed to them, shapes inferred again (onnx's inference)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for vi in fixed.graph.input:
        shape = inputs.get(vi.name)
        if shape is None or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        del dims[:]
        for d in shape:
            dims.add().dim_value = int(d)
    del fixed.graph.value_info[:]  # inferred again: symbolic dims would stay otherwise
    for vi in fixed.graph.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    inferred = infer_shapes(fixed, max_elements)
    return Graph.from_proto(inferred.graph, graph.opsets, values=dict(graph.initializers))


def gather_candidates(
    graph: Graph, providers: Sequence[ExecutionProvider]
) -> dict[str, list[Candidate]]:
    """Per node, in priority order, each provider's claim on it when it sees the whole graph
    (one node, or the fused group it would put the node in)."""
    out: dict[str, list[Candidate]] = {n.name: [] for n in graph.nodes}
    for provider in providers:
        claims, _ = provider.get_capability(GraphView(graph, {}))
        for cap in claims:
            group = cap.name if cap.fused else None
            cand = Candidate(provider.name, tuple(cap.nodes), group, cap)
            for n in cap.nodes:
                if n in out:
                    out[n].append(cand)
    return out


def _contested(
    candidates: Mapping[str, list[Candidate]],
) -> tuple[list[Candidate], list[tuple[Candidate, Candidate]]]:
    """The candidates worth timing: those of nodes more than one provider claims, each once;
    and (candidate, the one timed for it) pairs: a kernel two providers on one device share
    (turnout-numba's numpy kernels are the CPU provider's) is timed once."""
    seen: set[int] = set()
    first: dict[tuple[Any, ...], Candidate] = {}
    unique: list[Candidate] = []
    shared: list[tuple[Candidate, Candidate]] = []
    for cands in candidates.values():
        if len(cands) < 2:
            continue
        for c in cands:
            if id(c) in seen:
                continue
            seen.add(id(c))
            kernel = c.cap.kernel
            key = (id(kernel.factory), c.nodes) if kernel is not None else (id(c),)
            if key in first:
                shared.append((c, first[key]))
                continue
            first[key] = c
            unique.append(c)
    return unique, shared


def _restore(candidates: Mapping[str, list[Candidate]], kernels: Mapping[str, Any]) -> None:
    for cands in candidates.values():
        for c in cands:
            got = kernels.get(c.key)
            if got is not None:
                c.seconds, c.runs, c.note = (
                    got.get("seconds"),
                    got.get("runs", 0),
                    got.get("note", ""),
                )


def _stored(candidates: Mapping[str, list[Candidate]], copies: CopyTimes) -> dict[str, Any]:
    kernels = {
        c.key: {"seconds": c.seconds, "runs": c.runs, "note": c.note}
        for cands in candidates.values()
        for c in cands
    }
    return {"kernels": kernels, "copies": copies.seconds}


def _crossing_sizes(
    graph: Graph,
    candidates: Mapping[str, list[Candidate]],
    providers: Mapping[str, ExecutionProvider],
) -> set[int]:
    """The byte counts of values that may cross a device boundary: those read or written by a
    node some provider off the host claims."""
    sizes: set[int] = set()
    by_name = {n.name: n for n in graph.nodes}
    for n, cands in candidates.items():
        if not any(providers[c.provider].device != CPU for c in cands):
            continue
        for x in (*by_name[n].inputs, *by_name[n].outputs):
            known = static_shape(graph, x) if x else None
            if known is not None:
                count = 1
                for d in known[0]:
                    count *= d
                sizes.add(count * known[1].itemsize)
    return sizes
