"""Basic passes folding per-channel affine ops into a Conv's constant weights and bias:
Conv+BatchNormalization (inference form), Conv+Mul(constant), Conv+Add(constant).

A weight may also be the output of a ConstantOfShape read only as Conv weights (exporters
write placeholder weights so): it is materialized for the fold when it fits `max_tensor_elements`
and the folding budget `fold_max_total_bytes`, whatever `fold_max_elements` says, since the
Conv would allocate it on every run anyway.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import NodeProto

from turnout.graph.tensors import to_array
from turnout.optimizer.base import Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph, attr
from turnout.optimizer.match import Matcher

__all__ = ["fold_conv_bn", "fold_conv_add_mul"]


def _conv_before(g: OptGraph, m: Matcher, x: str) -> tuple[NodeProto, np.ndarray | None] | None:
    """The Conv producing `x` (and nothing else reading `x`) with a constant bias or none,
    and that bias; None if there is no such Conv."""
    conv = m.op(x, "Conv")
    if conv is None or m.only_reader(x) is None or len(conv.input) < 2:
        return None
    if len(conv.input) > 2 and conv.input[2]:
        b = g.const(conv.input[2])
        return (conv, b) if b is not None else None
    return conv, None


def _weight(g: OptGraph, m: Matcher, conv: NodeProto, ctx: PassContext) -> np.ndarray | None:
    """The Conv's float weight: a constant, or a ConstantOfShape only this Conv reads,
    materialized within the limits (its bytes are charged to the folding budget when the
    caller keeps the result: see `_charge`)."""
    name = conv.input[1]
    w = g.const(name)
    if w is None:
        w = _fill(g, m, conv, ctx)
    return w if w is not None and w.dtype.kind == "f" else None


def _fill_spec(g: OptGraph, m: Matcher, conv: NodeProto) -> tuple[list[int], np.ndarray] | None:
    """(dims, fill value) of the ConstantOfShape that `conv` reads as its weight, when Conv
    weights are all it is read as (duplicates merged, it may be several Convs' weight)."""
    name = conv.input[1]
    src = m.op(name, "ConstantOfShape")
    if src is None or not src.input or not src.input[0] or not m.internal(name):
        return None
    if not all(r.op_type == "Conv" and _reads_only_as_weight(r, name) for r in m.readers(name)):
        return None
    shape = g.const(src.input[0])
    if shape is None or shape.dtype != np.int64 or shape.ndim != 1 or (shape < 0).any():
        return None
    value = attr(src, "value")
    fill = to_array(value) if value is not None else np.zeros(1, np.float32)
    if fill.size != 1 or fill.dtype.kind != "f":
        return None
    return [int(d) for d in shape], fill.reshape(())


def _reads_only_as_weight(n: NodeProto, name: str) -> bool:
    # [] : a Conv this pass already gave a folded weight (the reader maps still list it)
    return [i for i, x in enumerate(n.input) if x == name] in ([], [1])


def _fill(g: OptGraph, m: Matcher, conv: NodeProto, ctx: PassContext) -> np.ndarray | None:
    spec = _fill_spec(g, m, conv)
    if spec is None:
        return None
    dims, fill = spec
    size = math.prod(dims)
    if size > ctx.max_tensor_elements:
        return None
    if ctx.folded_bytes + size * fill.dtype.itemsize > ctx.fold_max_total_bytes:
        return None
    return np.full(dims, fill, fill.dtype)


def _charge(g: OptGraph, conv: NodeProto, w: np.ndarray, ctx: PassContext) -> None:
    """Count a weight the fold materialized (not an initializer before) in the budget."""
    if g.const(conv.input[1]) is None:
        ctx.folded_bytes += w.nbytes


def _scaled(w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """`(w.astype(float64) * s).astype(w.dtype)` for a per-output-channel `s` (shape (m, 1, ..)):
    numpy multiplies in float64 and rounds into `w.dtype` as it goes (one pass, no float64
    copy of `w`)."""
    out = np.empty(w.shape, w.dtype)
    np.multiply(w, s, out=out, dtype=np.float64, casting="unsafe")
    return out


def _set_weights(g: OptGraph, conv: NodeProto, w: np.ndarray, b: np.ndarray) -> None:
    g.forget(conv.input[1])  # the old weight's decoded copy is not needed any more
    conv.input[1] = g.add_init(w, conv.input[1])
    bias = g.add_init(b, conv.input[2] if len(conv.input) > 2 and conv.input[2] else "bias")
    if len(conv.input) > 2:
        conv.input[2] = bias
    else:
        conv.input.append(bias)


@graph_pass("fold_conv_bn", Level.BASIC, keeps_types=True)
def fold_conv_bn(g: OptGraph, ctx: PassContext) -> int:
    """Conv -> BatchNormalization (one output, constant statistics) becomes one Conv."""
    changes = 0
    m = Matcher(g)  # kept current through m.replace/m.remove: one walk for the whole pass
    for bn in list(g.nodes):
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
            continue
        if sum(1 for o in bn.output if o) != 1 or attr(bn, "training_mode", 0):
            continue
        if attr(bn, "spatial", 1) != 1 or len(bn.input) < 5:
            continue
        found = _conv_before(g, m, bn.input[0])
        if found is None:
            continue
        conv, b = found
        params = [g.const(x) for x in bn.input[1:5]]
        if any(p is None for p in params):
            continue
        w = _weight(g, m, conv, ctx)
        if w is None:
            continue
        scale, bias, mean, var = (p.astype(np.float64) for p in params)  # type: ignore[union-attr]
        c = w.shape[0]
        if any(p.shape != (c,) for p in (scale, bias, mean, var)):
            continue
        eps = float(attr(bn, "epsilon", 1e-5))
        s = scale / np.sqrt(var + eps)
        b0 = b.astype(np.float64) if b is not None else np.zeros(c)
        new_w = _scaled(w, s.reshape((c,) + (1,) * (w.ndim - 1)))
        new_b = ((b0 - mean) * s + bias).astype(w.dtype)
        if not m.replace(bn.output[0], conv.output[0]):
            continue
        _charge(g, conv, new_w, ctx)
        _set_weights(g, conv, new_w, new_b)
        m.remove(bn)
        changes += 1
    return changes


def _channel_vector(c: np.ndarray, rank: int, m: int) -> np.ndarray | None:
    """`c` as a length-m per-output-channel vector if it broadcasts as (1, m, 1, ...) or less."""
    if c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    if shape[1] not in (1, m):
        return None
    return np.broadcast_to(c.reshape(-1), (m,)) if c.size == 1 else c.reshape(m)


@graph_pass("fold_conv_add_mul", Level.BASIC, keeps_types=True)
def fold_conv_add_mul(g: OptGraph, ctx: PassContext) -> int:
    """Conv -> Add(per-channel constant) into the bias; Conv -> Mul(constant) into W and B."""
    changes = 0
    m = Matcher(g)  # kept current through m.replace/m.remove: a Mul then an Add fold in turn
    for n in list(g.nodes):
        if n.op_type not in ("Add", "Mul") or n.domain not in ("", "ai.onnx") or len(n.input) != 2:
            continue
        for xi in (0, 1):
            found = _conv_before(g, m, n.input[xi])
            c = g.const(n.input[1 - xi])
            if found is None or c is None:
                continue
            conv, b = found
            w = _weight(g, m, conv, ctx) if n.op_type == "Mul" else _weight_info(g, m, conv)
            if w is None:
                continue
            ch = w.shape[0]
            vec = _channel_vector(c, w.ndim, ch)
            if vec is None or c.dtype != w.dtype:
                continue
            b0 = b if b is not None else np.zeros(ch, w.dtype)
            # results are fresh arrays already: astype copies only where the dtype differs
            if n.op_type == "Add":
                new_w, new_b = w, (b0 + vec).astype(w.dtype, copy=False)
            else:
                new_w = (w * vec.reshape((ch,) + (1,) * (w.ndim - 1))).astype(w.dtype, copy=False)
                new_b = (b0 * vec).astype(w.dtype, copy=False)
            if not m.replace(n.output[0], conv.output[0]):
                continue
            if n.op_type == "Add":
                bias = g.add_init(new_b, "bias")
                if len(conv.input) > 2:
                    conv.input[2] = bias
                else:
                    conv.input.append(bias)
            else:
                _charge(g, conv, new_w, ctx)
                _set_weights(g, conv, new_w, new_b)
            m.remove(n)
            changes += 1
            break
    return changes


def _weight_info(g: OptGraph, m: Matcher, conv: NodeProto) -> np.ndarray | None:
    """What folding an Add needs of the weight: its dtype and output channels. A zero-strided
    stand-in for a ConstantOfShape weight, which stays as it is."""
    w = g.const(conv.input[1])
    if w is not None:
        return w if w.dtype.kind == "f" else None
    spec = _fill_spec(g, m, conv)
    if spec is None:
        return None
    dims, fill = spec
    return np.broadcast_to(np.zeros((), fill.dtype), dims)
