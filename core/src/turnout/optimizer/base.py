"""What a pass is (name, level, function), the context it runs in, and the report of a run."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from turnout.optimizer.graph import OptGraph

__all__ = [
    "Level",
    "GraphPass",
    "PassContext",
    "PassResult",
    "OptimizationReport",
    "PASSES",
    "graph_pass",
    "TURNOUT_DOMAIN",
]

TURNOUT_DOMAIN = "ai.turnout"


class Level(enum.IntEnum):
    """ORT's optimization levels (same numbers as `GraphOptimizationLevel`)."""

    DISABLE = 0
    BASIC = 1
    EXTENDED = 2
    LAYOUT = 3
    ALL = 99

    @staticmethod
    def parse(value: Any) -> Level:
        if isinstance(value, str):
            key = value.upper().removeprefix("ORT_").removeprefix("ENABLE_").removesuffix("_ALL")
            names = {"DISABLE": 0, "BASIC": 1, "EXTENDED": 2, "LAYOUT": 3, "ALL": 99, "": 99}
            if key not in names:
                raise ValueError(f"unknown optimization level {value!r}")
            return Level(names[key])
        return Level(int(value))


# (fused op domain, fused op type, op types the fused op replaces) -> may the fusion fire?
SupportsFn = Callable[[str, str, tuple[str, ...]], bool]


def _always(domain: str, op_type: str, replaced: tuple[str, ...]) -> bool:
    return True


Evaluate = Callable[[onnx.ModelProto], Sequence[Any]]
"""How constant folding runs nodes: a model without inputs in, its outputs out (raises when a
node cannot run). The engine hands one in (`turnout.engine.evaluate.evaluate_model`); the
optimizer cannot build sessions itself, being below the engine."""


@dataclass
class PassContext:
    """What a pass may consult besides the graph: which fused ops the owners can run, limits."""

    supports: SupportsFn = _always
    fold_max_elements: int = 1 << 20  # the largest tensor constant folding may create
    fold_max_total_bytes: int = 1 << 28  # all tensors that folding keeps, together
    max_tensor_elements: int = 1 << 32  # the largest tensor a pass may materialize at all
    folded_bytes: int = 0  # what folding has kept so far in this run
    inline_ifs: bool = True  # whether inline_constant_if may inline
    nhwc_ops: frozenset[tuple[str, str]] = frozenset()  # handed over channels-last (layout.py)
    # the passes above BASIC that this run chose: fuse_subgraphs runs them in bodies too
    body_passes: list[GraphPass] = field(default_factory=list)
    # runs a model without inputs and returns its outputs (the engine's kernels); None: the
    # optimizer folds only what it computes itself (Constant, ConstantOfShape, static Shape)
    evaluate: Evaluate | None = None

    def can_emit(self, domain: str, op_type: str, replaced: Iterable[str]) -> bool:
        return self.supports(domain, op_type, tuple(replaced))


PassFn = Callable[[OptGraph, PassContext], int]


@dataclass(frozen=True)
class GraphPass:
    """A named graph rewrite at one level. `fn(graph, ctx)` edits in place, returns #changes.

    `keeps_types`: the pass never changes what onnx would infer for the values it leaves
    (it only removes nodes, or merges equal values), so its changes need no new inference.

    `reports_edits`: whenever the pass edits the graph it returns a count above zero (every
    built-in pass does: the inferred types are refreshed only after a change is reported).
    The optimizer then keeps its snapshot of the nodes (`provenance.Tracker`) over a run of
    this pass that reports none; a pass without it (a plugin's, unless it says so) is
    followed by a new snapshot, so an edit it leaves uncounted is not taken for the next
    pass's.
    """

    name: str
    level: Level
    fn: PassFn
    doc: str = ""
    keeps_types: bool = False
    reports_edits: bool = False


PASSES: list[GraphPass] = []


def graph_pass(name: str, level: Level, keeps_types: bool = False) -> Callable[[PassFn], PassFn]:
    """Decorator: register `fn` as a built-in pass (in definition order within its level)."""

    def deco(fn: PassFn) -> PassFn:
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        PASSES.append(GraphPass(name, level, fn, doc, keeps_types, reports_edits=True))
        return fn

    return deco


@dataclass(frozen=True)
class PassResult:
    name: str
    level: Level
    changes: int
    nodes_before: int
    nodes_after: int
    ms: float


@dataclass
class OptimizationReport:
    """Which passes ran at which level and what each changed (one entry per pass run)."""

    level: Level
    nodes_before: int = 0
    nodes_after: int = 0
    results: list[PassResult] = field(default_factory=list)
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    # node a pass wrote -> the original nodes it stands for (their names, or op_index)
    provenance: dict[str, list[str]] = field(default_factory=dict)

    def changes(self) -> dict[str, int]:
        """Total changes per pass name (passes run more than once are summed)."""
        out: dict[str, int] = {}
        for r in self.results:
            out[r.name] = out.get(r.name, 0) + r.changes
        return out

    def fired(self, name: str) -> bool:
        return self.changes().get(name, 0) > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level.name,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "passes": [
                {"name": r.name, "level": r.level.name, "changes": r.changes, "ms": round(r.ms, 3)}
                for r in self.results
            ],
            "ops_before": self.ops_before,
            "ops_after": self.ops_after,
            "provenance": self.provenance,
        }

    def format(self) -> str:
        lines = [
            f"optimization level {self.level.name}: {self.nodes_before} -> {self.nodes_after} nodes"
        ]
        for name, n in self.changes().items():
            if n:
                lines.append(f"  {name:32s} {n:5d} change(s)")
        lines.extend(self.format_provenance())
        return "\n".join(lines)

    def format_provenance(self) -> list[str]:
        """One line per rewritten node: `new <- original, original`."""
        return [f"  {new} <- {', '.join(srcs)}" for new, srcs in sorted(self.provenance.items())]
