"""The graph optimizer: passes grouped by onnxruntime's levels, run before partitioning.

    model, report = optimize(model, Level.ALL, supports=...)

- BASIC passes are provider-independent rewrites that keep standard ops (constant and shape
  folding, dead/no-op/duplicate node removal, Conv+BN and Conv+Add/Mul folding, MatMul+Add ->
  Gemm, Transpose merging and pushing).
- EXTENDED passes fuse patterns into bigger ops (standard ones where the opset has them, else
  turnout's own `ai.turnout` domain). Each fusion asks `supports(domain, op, replaced_ops)`
  whether the provider that would own the nodes can run the fused op, and does not fire if not.
- Plugins add passes through the `turnout_graph_passes` hook (see `GraphPass`).

A pass is `fn(graph: OptGraph, ctx: PassContext) -> int` (the number of changes it made) with
a name and a level; `PASSES` lists the built-in ones, `ORDER` the order they run in.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections import Counter
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import numpy as np
import onnx

from turnout._submodules import submodule
from turnout.graph.errors import GraphPassError, TurnoutError
from turnout.graph.limits import ResourceLimits
from turnout.graph.shared_arrays import SharedArrays
from turnout.optimizer import (  # noqa: F401 - importing registers the passes, in this order
    cleanup,
    conv,
    fold,
    fusion_activation,
    fusion_attention,
    fusion_dynamic_quant,
    fusion_gelu,
    fusion_norm,
    gemm,
    layout,
    qdq,
    subgraph,
    transpose,
)
from turnout.optimizer.base import (
    PASSES,
    TURNOUT_DOMAIN,
    Evaluate,
    GraphPass,
    Level,
    OptimizationReport,
    PassContext,
    PassResult,
    SupportsFn,
)
from turnout.optimizer.graph import OptGraph
from turnout.optimizer.provenance import Tracker
from turnout.optimizer.subgraph import passes_load_checks

__all__ = [
    "PASSES",
    "TURNOUT_DOMAIN",
    "Evaluate",
    "GraphPass",
    "Level",
    "OptGraph",
    "OptimizationReport",
    "PassContext",
    "PassResult",
    "as_pass",
    "optimize",
    "passes_for",
]

MAX_ROUNDS = 4

# the order built-in passes run in (plugin passes follow the built-in ones of their level):
# fusions that consume activations/bias Adds come before those that absorb them
ORDER = [
    "fold_constants",
    "fold_shapes",
    "inline_constant_if",
    "fold_subgraphs",
    "eliminate_noops",
    "eliminate_common_subexpressions",
    "merge_transposes",
    "push_transposes",
    "fold_conv_bn",
    "fold_conv_add_mul",
    "matmul_add_to_gemm",
    "eliminate_dead_nodes",
    "fold_qdq",
    "fuse_dynamic_quant_matmul",
    "fuse_gelu",
    "fuse_layer_norm",
    "fuse_skip_layer_norm",
    "fuse_attention",
    "fuse_matmul_add",
    "fuse_conv_add_activation",
    "fuse_activation",
    "fuse_subgraphs",
]


def as_pass(obj: Any) -> GraphPass:
    """A plugin's contribution as a GraphPass: a GraphPass, or (name, level, fn).

    `fn` takes `(graph, ctx)` or just `(graph)`, and returns the number of changes (or None).
    """
    if isinstance(obj, GraphPass):
        return obj
    if isinstance(obj, tuple) and len(obj) == 3:
        name, level, fn = obj
    else:
        name, level, fn = obj.name, obj.level, obj.fn
    params = len(inspect.signature(fn).parameters)

    def run(g: OptGraph, ctx: PassContext) -> int:
        before = len(g.nodes)
        result = fn(g, ctx) if params >= 2 else fn(g)
        return int(result) if isinstance(result, int) else abs(before - len(g.nodes))

    return GraphPass(str(name), Level.parse(level), run)


def passes_for(level: Level, extra: Iterable[GraphPass] = ()) -> list[GraphPass]:
    """The passes that run at `level`, built-in first within each level, then contributed."""
    chosen = [p for p in [*PASSES, *extra] if p.level <= level and p.level > Level.DISABLE]
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(chosen, key=lambda p: (min(int(p.level), 2), rank.get(p.name, len(ORDER))))


def optimize(
    model: onnx.ModelProto,
    level: Any = Level.ALL,
    *,
    supports: SupportsFn | None = None,
    extra_passes: Iterable[Any] = (),
    keep_initializers: Iterable[str] = (),
    fold_max_elements: int | None = None,
    limits: ResourceLimits | None = None,
    values: dict[str, np.ndarray] | None = None,
    nhwc_ops: frozenset[tuple[str, str]] = frozenset(),
    evaluate: Evaluate | None = None,
    decoded: dict[str, np.ndarray] | None = None,
    values_only_above: int | None = None,
    shared: SharedArrays | None = None,
) -> tuple[onnx.ModelProto, OptimizationReport]:
    """Optimize a copy of `model` at `level`; returns it with a report of what each pass did.

    `evaluate` runs the nodes that constant folding computes (`PassContext.evaluate`; the
    engine's `turnout.engine.evaluate.evaluate_model`); without it only what the optimizer
    computes itself folds (Constant, ConstantOfShape, Shape and Size of static shapes).

    `limits` bounds what folding and shape inference may materialize (`fold_max_elements`
    overrides its field of that name).

    `keep_initializers` names initializers that must stay as they are (overridden at run time).
    `nhwc_ops` names the Conv-like ops to hand over channels-last (`layout.nhwc_ops`).
    `values`, when given, receives the initializers of the returned model that the optimizer
    holds decoded (each equal to `numpy_helper.to_array` of its proto), so that the caller
    need not decode them again. `decoded` is a cache of `model`'s own initializers, decoded,
    by name: given, it is read and filled, so optimizing the same model again (a session's
    second tier) shares their arrays instead of decoding them twice. With
    `values_only_above` (and `values`), initializers of more elements than that are written
    without their data (name, type and dims only): the caller has their arrays in `values`,
    and the model is cheap to copy, check and infer (small ones, shape tensors among them,
    keep their data). `shared` holds the arrays of another optimization of the same model
    (a session's other tier): a new initializer equal to one of them is that one.
    """
    lvl = Level.parse(level)
    if lvl == Level.DISABLE:
        report = OptimizationReport(lvl)
        report.nodes_before = report.nodes_after = len(model.graph.node)
        report.ops_before = report.ops_after = _ops(model.graph.node)
        return model, report
    limits = limits or ResourceLimits()
    if fold_max_elements is not None:
        limits = dataclasses.replace(limits, fold_max_elements=int(fold_max_elements))
    extra = [as_pass(p) for p in extra_passes]
    keep = list(keep_initializers)
    strip = values_only_above if values is not None else None
    run = (model, lvl, limits, supports, extra, keep, nhwc_ops, evaluate, decoded, strip, shared)
    out, report, g = _optimize(*run, inline=True)
    if g.inlined and not passes_load_checks(out):
        # an inlined branch exposed what only its If's loose types let pass: keep the Ifs
        out, report, g = _optimize(*run, inline=False)
    if values is not None:
        values.update(g.values)
    return out, report


def _optimize(
    model: onnx.ModelProto,
    lvl: Level,
    limits: ResourceLimits,
    supports: SupportsFn | None,
    extra: list[GraphPass],
    keep_initializers: list[str],
    nhwc_ops: frozenset[tuple[str, str]],
    evaluate: Evaluate | None,
    decoded: dict[str, np.ndarray] | None,
    values_only_above: int | None,
    shared: SharedArrays | None,
    inline: bool,
) -> tuple[onnx.ModelProto, OptimizationReport, OptGraph]:
    from turnout.graph.model import light_copy

    report = OptimizationReport(lvl)
    report.nodes_before = len(model.graph.node)
    report.ops_before = _ops(model.graph.node)
    # the working copy leaves the initializers out: commit() writes back those still used
    out = light_copy(model, lambda t: None)
    g = OptGraph(
        out,
        keep_initializers,
        initializers=model.graph.initializer,
        shape_data_max_elements=limits.shape_data_max_elements,
        decoded=decoded,
        shared=shared,
    )
    ctx = PassContext(
        fold_max_elements=limits.fold_max_elements,
        fold_max_total_bytes=limits.fold_max_total_bytes,
        max_tensor_elements=limits.max_tensor_elements,
        inline_ifs=inline,
        nhwc_ops=nhwc_ops,
        evaluate=evaluate,
    )
    if supports is not None:
        ctx.supports = supports
    # the original nodes by id, held so that no id is reused, with the name they go by
    labels = {id(n): (n, n.name or f"{n.op_type}_{i}") for i, n in enumerate(g.nodes)}
    sources: dict[str, list[str]] = {}  # provenance of the nodes passes wrote, by name
    tracker = Tracker(labels, sources)
    chosen = passes_for(lvl, extra)
    basic = [p for p in chosen if p.level == Level.BASIC]
    later = [p for p in chosen if p.level > Level.BASIC]
    ctx.body_passes = later
    for _ in range(MAX_ROUNDS):
        if not sum(_run(g, p, ctx, report, tracker) for p in basic):
            break
    if later:
        for p in later:
            _run(g, p, ctx, report, tracker)
        dead = [p for p in basic if p.name == "eliminate_dead_nodes"]
        for p in dead:
            _run(g, p, ctx, report, tracker)
    g.toposort()
    g.commit(values_only_above)
    alive = {n.name for n in g.nodes}
    report.provenance = {k: v for k, v in sources.items() if k in alive}
    report.nodes_after = len(g.nodes)
    report.ops_after = _ops(g.nodes)
    return out, report, g


def _run(
    g: OptGraph, p: GraphPass, ctx: PassContext, report: OptimizationReport, tracker: Tracker
) -> int:
    before = len(g.nodes)
    nodes = list(g.nodes)  # held: no id is reused while the pass runs
    tracker.before(nodes)  # to tell the nodes the pass edits in place
    t0 = time.perf_counter()
    try:
        changes = p.fn(g, ctx)
    except TurnoutError:
        raise  # a defect of the model (a tensor that cannot be decoded, ...): the user's to fix
    except Exception as e:
        raise GraphPassError(f"graph pass {p.name!r} failed: {type(e).__name__}: {e}") from e
    if changes and not p.keeps_types:
        g.mark_changed()
    tracker.after(nodes, g.nodes, changes, p.reports_edits)
    report.results.append(
        PassResult(p.name, p.level, changes, before, len(g.nodes), (time.perf_counter() - t0) * 1e3)
    )
    return changes


def _ops(nodes: Iterable[onnx.NodeProto]) -> dict[str, int]:
    c = Counter(
        (f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
        for n in nodes
    )
    return dict(sorted(c.items()))


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
