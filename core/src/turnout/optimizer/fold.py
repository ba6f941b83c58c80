"""Basic passes that compute at optimization time: constant folding and shape folding.

Constant folding evaluates every node whose inputs are all constants with turnout's own CPU
provider (one session over the whole constant subgraph, optimization disabled), and keeps a
result as an initializer only up to `fold_max_elements` elements, so a tiny ConstantOfShape
cannot blow the model up. Shape and Size of a value whose inferred shape is static count as
constants, so a Shape -> Gather -> Concat chain folds in one sweep. Constant nodes always fold
(their data is in the model already), and Constant, ConstantOfShape, Shape and Size are
computed here directly; only the rest needs the session.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto, helper

from turnout.graph.tensors import to_array
from turnout.optimizer.base import Level, PassContext, graph_pass
from turnout.optimizer.evaluate import evaluate_nodes
from turnout.optimizer.graph import NONDETERMINISTIC, OptGraph, attr
from turnout.optimizer.qdq import unit_dequantizers

__all__ = ["fold_constants", "fold_shapes"]


def _foldable(n: NodeProto) -> bool:
    if n.domain not in ("", "ai.onnx") or n.op_type in NONDETERMINISTIC:
        return False
    return not any(a.type in (a.GRAPH, a.GRAPHS) for a in n.attribute)


@graph_pass("fold_constants", Level.BASIC)
def fold_constants(g: OptGraph, ctx: PassContext) -> int:
    """Replace nodes whose inputs are all constants by initializers holding their outputs."""
    known: set[str] = set()
    folded: list[NodeProto] = []
    values: dict[str, np.ndarray] = {}  # the results computed here, without a session
    qdq = unit_dequantizers(g)
    for n in g.nodes:
        if not _foldable(n) or id(n) in qdq or any(o in g.protected for o in n.output):
            continue
        if n.op_type in ("Shape", "Size") and n.input:
            value = _shape_value(g, n)
            if value is not None:
                values[n.output[0]] = value
                folded.append(n)
                known.add(n.output[0])
                continue
        if not all(not x or x in known or g.const(x) is not None for x in n.input):
            continue
        tps = [g.types.get(o) for o in n.output if o]
        if any(tp is None or tp.WhichOneof("value") != "tensor_type" for tp in tps):
            continue
        if n.op_type != "Constant" and not all(
            _small(g, o, ctx.fold_max_elements) for o in n.output if o
        ):
            continue  # evaluating it would materialize a tensor of unknown or excessive size
        folded.append(n)
        known.update(o for o in n.output if o)
    if not folded:
        return 0
    folded = _evaluate_all(g, folded, values, ctx)
    if not folded:
        return 0
    sub_reads = g.subgraph_reads()
    while True:  # shrink the folded set until every kept result is under the size cap
        in_set = {id(n) for n in folded}
        outside_reads: set[str] = set(sub_reads)
        for n in g.nodes:
            if id(n) not in in_set:
                outside_reads.update(n.input)
        kept_outputs = {o for n in folded for o in n.output if o in outside_reads}
        # what Constant nodes hold is in the model already: neither capped nor charged
        charged = {o for n in folded if n.op_type != "Constant" for o in n.output} & kept_outputs
        too_big = [
            n
            for n in folded
            if any(o in charged and values[o].size > ctx.fold_max_elements for o in n.output)
        ]
        if not too_big:
            too_big = _over_budget(folded, charged, values, ctx)
        if not too_big:
            break
        drop = {id(n) for n in too_big}
        folded = [n for n in folded if id(n) not in drop]
    if not folded:
        return 0
    in_set = {id(n) for n in folded}
    g.remove(*folded)
    for o in kept_outputs:
        g.inits[o] = values[o]
        if o in charged:
            ctx.folded_bytes += values[o].nbytes
    return len(in_set)


def _small(g: OptGraph, name: str, limit: int) -> bool:
    """Whether value `name` has a static shape of at most `limit` elements."""
    dims = _static_dims(g, name)
    return dims is not None and None not in dims and math.prod(dims) <= limit  # type: ignore[arg-type]


def _over_budget(
    folded: list[NodeProto], kept: set[str], values: dict[str, np.ndarray], ctx: PassContext
) -> list[NodeProto]:
    """The node keeping the largest result, while the kept results exceed the session's
    budget of folded bytes (`fold_max_total_bytes`); none when they fit."""
    sizes = {o: values[o].nbytes for o in kept}
    if ctx.folded_bytes + sum(sizes.values()) <= ctx.fold_max_total_bytes:
        return []
    biggest = max(sizes, key=sizes.__getitem__)
    return [n for n in folded if biggest in n.output]


def _evaluate_all(
    g: OptGraph, folded: list[NodeProto], values: dict[str, np.ndarray], ctx: PassContext
) -> list[NodeProto]:
    """Compute the outputs of `folded` (in order, inputs constant or computed before) into
    `values`: Constant and ConstantOfShape here, the rest in one session. Returns the nodes
    that have their values (all of them, or those computed here when the session failed)."""
    done: list[NodeProto] = []
    rest: list[NodeProto] = []
    for n in folded:
        if n.output[0] in values:  # Shape/Size of a static shape
            done.append(n)
            continue
        value = _direct(g, n, values) if n.op_type in _DIRECT else None
        if n.op_type in _RESHAPES:
            value = _reshaped(g, n, values)
        if value is None:
            rest.append(n)
        else:
            values[n.output[0]] = value
            done.append(n)
    if rest:
        results = evaluate_nodes(g, rest, values, ctx)
        if results is not None:
            values.update(results)
            done = folded
    return done


_DIRECT = frozenset({"Constant", "ConstantOfShape"})
_CONSTANT_ATTRS: dict[str, type[np.generic]] = {
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
}


def _direct(g: OptGraph, n: NodeProto, values: dict[str, np.ndarray]) -> np.ndarray | None:
    """The output of a Constant or ConstantOfShape with constant input, computed as the CPU
    kernel does; None to leave it to the session (unusual attributes, inputs, failures)."""
    try:
        if n.op_type == "Constant":
            if len(n.attribute) != 1:
                return None
            a = n.attribute[0]
            if a.name == "value":
                return to_array(a.t)
            dtype = _CONSTANT_ATTRS.get(a.name)
            return None if dtype is None else np.array(helper.get_attribute_value(a), dtype)
        if len(n.input) != 1 or not n.input[0]:
            return None
        shape = values.get(n.input[0])
        if shape is None:
            shape = g.const(n.input[0])
        if shape is None or shape.dtype != np.int64 or shape.ndim != 1 or (shape < 0).any():
            return None
        v = attr(n, "value")
        fill = np.zeros(1, np.float32) if v is None else to_array(v).ravel()[:1]
        if fill.size != 1 or fill.dtype == object:
            return None
        return np.full([int(d) for d in shape], fill[0], dtype=fill.dtype)
    except Exception:
        return None


_RESHAPES = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})


def _reshaped(g: OptGraph, n: NodeProto, values: dict[str, np.ndarray]) -> np.ndarray | None:
    """The output of an op that only reshapes its first input (Unsqueeze of a BatchNorm
    parameter, ...), as the CPU kernel computes it: the input, as an owned array of the
    output's inferred static shape. None to leave it to the session (an input computed
    there, a shape that is not static or does not hold the input's elements)."""
    if not n.input or not n.input[0]:
        return None
    x = values.get(n.input[0])
    if x is None:
        x = g.const(n.input[0])
    dims = _static_dims(g, n.output[0])
    if x is None or dims is None or None in dims or math.prod(dims) != x.size:  # type: ignore[arg-type]
        return None
    out: np.ndarray = x.reshape(dims).copy()
    return out


def _static_dims(g: OptGraph, name: str) -> list[int | None] | None:
    shape = g.shape(name)
    if shape is None:
        return None
    return [d if isinstance(d, int) else None for d in shape]


def _shape_value(g: OptGraph, n: NodeProto) -> np.ndarray | None:
    """The value of a Shape or Size node whose input has a static inferred shape (the picked
    dims, for Shape's start/end), else None."""
    dims = _static_dims(g, n.input[0])
    if dims is None:
        return None
    if n.op_type == "Size":
        if None in dims:
            return None
        return np.array(math.prod(dims), np.int64)  # type: ignore[arg-type]
    r = len(dims)
    picked = dims[slice(attr(n, "start", 0), attr(n, "end", r))]
    if None in picked:
        return None
    return np.array(picked, np.int64)


@graph_pass("fold_shapes", Level.BASIC)
def fold_shapes(g: OptGraph, ctx: PassContext) -> int:
    """Shape/Size of statically known dims, and Shape->Gather/Slice picking only static dims."""
    changes = 0
    prod = g.producers()
    for n in list(g.nodes):
        if n.domain not in ("", "ai.onnx") or any(o in g.protected for o in n.output):
            continue
        value: np.ndarray | None = None
        if n.op_type in ("Shape", "Size"):
            value = _shape_value(g, n)
        elif n.op_type in ("Gather", "Slice"):
            src = prod.get(n.input[0])
            if src is None or src.op_type != "Shape" or src.domain not in ("", "ai.onnx"):
                continue
            dims = _static_dims(g, src.input[0])
            if dims is None:
                continue
            r = len(dims)
            full = dims[slice(attr(src, "start", 0), attr(src, "end", r))]
            value = _pick(g, n, full)
        if value is not None:
            name = n.output[0]
            g.remove(n)
            g.inits[name] = value
            changes += 1
    return changes


def _pick(g: OptGraph, n: NodeProto, dims: list[int | None]) -> np.ndarray | None:
    arr = np.array([d if d is not None else -1 for d in dims], np.int64)
    known = np.array([d is not None for d in dims])
    try:
        if n.op_type == "Gather":
            idx = g.const(n.input[1])
            if idx is None or attr(n, "axis", 0) != 0:
                return None
            sel, ok = arr[idx], known[idx]
        else:
            if len(n.input) < 3:
                return None
            starts, ends = g.const(n.input[1]), g.const(n.input[2])
            axes = g.const(n.input[3]) if len(n.input) > 3 and n.input[3] else np.zeros(1, int)
            steps = g.const(n.input[4]) if len(n.input) > 4 and n.input[4] else np.ones(1, int)
            if starts is None or ends is None or axes is None or steps is None:
                return None
            if starts.size != 1 or int(axes.reshape(-1)[0]) not in (0, -1):
                return None
            sl = slice(int(starts[0]), int(ends[0]), int(steps[0]))
            sel, ok = arr[sl], known[sl]
    except (IndexError, ValueError):
        return None
    return np.asarray(sel, np.int64) if np.all(ok) else None
