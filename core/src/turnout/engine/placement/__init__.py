"""Placement policies: which provider runs each node of a graph.

`priority` (the default) is onnxruntime's rule: providers in the session's order each claim
the nodes nobody claimed before them. `measured` asks every provider what it would claim of
the whole graph, times the candidates' real kernels and the copies at the session's shapes
(`timing`), and places each node or fused group where the whole plan costs least (`cost`);
priority still breaks ties and orders fusion, and a provider never gets a node it did not
claim. The times are cached (`cache`), so a second session of the same model places at once.

Session config entries (the engine reads them from `EngineOptions.config`):
`session.turnout.placement` = "priority" | "measured", and
`session.turnout.placement_budget_s`, the timing pass's budget in seconds.

`measured` lives in `turnout.engine.placement.measured`, imported when a session asks for it
(its names are read here too): a `priority` session imports neither the timing pass nor the
cache.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from turnout.engine.partition import GraphPartition, partition_graph
from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import Graph
from turnout.sdk.provider import ExecutionProvider

if TYPE_CHECKING:
    import onnx

    from turnout.engine.options import EngineOptions
    from turnout.engine.placement.measured import MeasuredPlacement, at_shapes

__all__ = [
    "BUDGET_KEY",
    "DEFAULT_BUDGET_S",
    "PLACEMENT_KEY",
    "POLICIES",
    "MeasuredPlacement",
    "at_shapes",
    "PlacementPolicy",
    "PriorityPlacement",
    "budget_seconds",
    "placement_policy",
    "policy_name",
    "unknown_shapes",
]

PLACEMENT_KEY = "session.turnout.placement"
BUDGET_KEY = "session.turnout.placement_budget_s"
POLICIES = ("priority", "measured")
DEFAULT_BUDGET_S = 30.0
"""The timing pass's default budget: enough for every candidate of the benchmark zoo's models
on a 2-core machine; a node left untimed when it runs out stays where priority puts it."""


class PlacementPolicy(Protocol):
    """Places a graph's nodes on providers (in the session's priority order)."""

    name: str

    def place(self, graph: Graph, providers: Sequence[ExecutionProvider]) -> GraphPartition:
        """Every node of `graph` assigned; raises naming a node nobody claims."""
        ...


class PriorityPlacement:
    """Each node to the first provider that claims it (onnxruntime's rule)."""

    name = "priority"

    def place(self, graph: Graph, providers: Sequence[ExecutionProvider]) -> GraphPartition:
        return partition_graph(graph, providers)


def policy_name(config: Mapping[str, str]) -> str:
    """The placement policy a session's config entries ask for ("priority" by default).

    :raises InvalidArgument: the entry names no policy.
    """
    name = config.get(PLACEMENT_KEY, "priority").strip().lower()
    if name not in POLICIES:
        raise InvalidArgument(f"{PLACEMENT_KEY} must be one of {POLICIES}, not {name!r}")
    return name


def placement_policy(options: EngineOptions, model: onnx.ModelProto | None) -> PlacementPolicy:
    """The policy the options ask for (`session.turnout.placement`), for the optimized
    `model` (its digest keys the placement cache)."""
    if policy_name(options.config) == "priority":
        return PriorityPlacement()
    from turnout.engine.placement import cache
    from turnout.engine.placement.measured import MeasuredPlacement

    return MeasuredPlacement(
        budget_seconds(options.config), cache.model_digest(model) if model else None
    )


def unknown_shapes(placement: Mapping[str, Any] | None) -> bool:
    """Whether a measured placement left nodes untimed for want of static shapes (then the
    session places again at its first run, with that run's shapes)."""
    nodes = (placement or {}).get("nodes", {})
    if not nodes:  # priority placement, or nothing placed by measure
        return False
    from turnout.engine.placement.timing import SHAPE_UNKNOWN

    return any(r["note"] == SHAPE_UNKNOWN for entry in nodes.values() for r in entry["candidates"])


def budget_seconds(config: Mapping[str, str]) -> float:
    """The timing budget from the config entry (seconds, > 0), or the default."""
    raw = config.get(BUDGET_KEY)
    if raw is None:
        return DEFAULT_BUDGET_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InvalidArgument(f"{BUDGET_KEY} must be a number of seconds above 0, not {raw!r}")
    return value


_MEASURED = ("MeasuredPlacement", "at_shapes", "gather_candidates")


def __getattr__(name: str) -> Any:
    """The measured policy's public names, its module imported on first read."""
    if name in _MEASURED:
        return getattr(importlib.import_module(f"{__name__}.measured"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
