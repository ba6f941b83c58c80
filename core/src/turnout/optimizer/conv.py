"""Basic passes folding per-channel affine ops into a Conv's constant weights and bias:
Conv+BatchNormalization (inference form), Conv+Mul(constant), Conv+Add(constant)."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from .base import Level, PassContext, graph_pass
from .graph import OptGraph, attr
from .match import Matcher

__all__ = ["fold_conv_bn", "fold_conv_add_mul"]


def _conv_before(
    g: OptGraph, m: Matcher, x: str
) -> tuple[NodeProto, np.ndarray, np.ndarray | None] | None:
    """The Conv producing `x` (and nothing else reading `x`) with constant W and B, else None."""
    conv = m.op(x, "Conv")
    if conv is None or m.only_reader(x) is None:
        return None
    w = g.const(conv.input[1])
    if w is None or w.dtype.kind != "f":
        return None
    b = None
    if len(conv.input) > 2 and conv.input[2]:
        b = g.const(conv.input[2])
        if b is None:
            return None
    return conv, w, b


def _scaled(w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """`(w.astype(float64) * s).astype(w.dtype)` for a per-output-channel `s` (shape (m, 1, ..)),
    a block of channels at a time: the same values without float64 copies of all of `w`."""
    out = np.empty(w.shape, w.dtype)
    step = max(1, (1 << 16) // max(1, w[0].size))  # about 64K elements per block
    for i in range(0, w.shape[0], step):
        out[i : i + step] = w[i : i + step].astype(np.float64) * s[i : i + step]
    return out


def _set_weights(g: OptGraph, conv: NodeProto, w: np.ndarray, b: np.ndarray) -> None:
    g.forget(conv.input[1])  # the old weight's decoded copy is not needed any more
    conv.input[1] = g.add_init(w, conv.input[1])
    bias = g.add_init(b, conv.input[2] if len(conv.input) > 2 and conv.input[2] else "bias")
    if len(conv.input) > 2:
        conv.input[2] = bias
    else:
        conv.input.append(bias)


@graph_pass("fold_conv_bn", Level.BASIC)
def fold_conv_bn(g: OptGraph, ctx: PassContext) -> int:
    """Conv -> BatchNormalization (one output, constant statistics) becomes one Conv."""
    changes = 0
    m = Matcher(g)
    for bn in list(g.nodes):
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
            continue
        if sum(1 for o in bn.output if o) != 1 or attr(bn, "training_mode", 0):
            continue
        if attr(bn, "spatial", 1) != 1:
            continue
        found = _conv_before(g, m, bn.input[0])
        if found is None:
            continue
        conv, w, b = found
        params = [g.const(x) for x in bn.input[1:5]]
        if any(p is None for p in params):
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
        if not g.replace_value(bn.output[0], conv.output[0]):
            continue
        _set_weights(g, conv, new_w, new_b)
        g.remove(bn)
        changes += 1
        m = Matcher(g)
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


@graph_pass("fold_conv_add_mul", Level.BASIC)
def fold_conv_add_mul(g: OptGraph, ctx: PassContext) -> int:
    """Conv -> Add(per-channel constant) into the bias; Conv -> Mul(constant) into W and B."""
    changes = 0
    m = Matcher(g)
    for n in list(g.nodes):
        if n.op_type not in ("Add", "Mul") or n.domain not in ("", "ai.onnx") or len(n.input) != 2:
            continue
        for xi in (0, 1):
            found = _conv_before(g, m, n.input[xi])
            c = g.const(n.input[1 - xi])
            if found is None or c is None:
                continue
            conv, w, b = found
            ch = w.shape[0]
            vec = _channel_vector(c, w.ndim, ch)
            if vec is None or c.dtype != w.dtype:
                continue
            b0 = b if b is not None else np.zeros(ch, w.dtype)
            if n.op_type == "Add":
                new_w, new_b = w, (b0 + vec).astype(w.dtype)
            else:
                new_w = (w * vec.reshape((ch,) + (1,) * (w.ndim - 1))).astype(w.dtype)
                new_b = (b0 * vec).astype(w.dtype)
            if not g.replace_value(n.output[0], conv.output[0]):
                continue
            if n.op_type == "Add":
                bias = g.add_init(new_b, "bias")
                if len(conv.input) > 2:
                    conv.input[2] = bias
                else:
                    conv.input.append(bias)
            else:
                _set_weights(g, conv, new_w, new_b)
            g.remove(n)
            changes += 1
            m = Matcher(g)
            break
    return changes
