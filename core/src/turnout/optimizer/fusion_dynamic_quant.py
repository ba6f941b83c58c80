"""Extended pass: the dynamically quantized MatMul that onnxruntime's `quantize_dynamic` writes
-> one com.microsoft::DynamicQuantizeMatMul(A, B, b_scale, b_zero_point), as onnxruntime's
DynamicQuantizeMatMulFusion writes it.

    x ─ DynamicQuantizeLinear ─┬─ x_q ──── MatMulInteger(x_q, W, x_zp, W_zp) ─ Cast(float) ─┐
                               ├─ x_zp ───┘                                                 Mul ─► y
                               └─ x_scale ─ Mul(x_scale, W_scale) ─────────────────────────┘

`y = float32(sum (x_q - x_zp)(W - W_zp)) * float32(x_scale * W_scale)`: the fused kernel
quantizes x, multiplies in int32 and scales as it stores, with the same float32 operations,
so the result is the unfused graph's bit for bit (the numba provider's kernel and the CPU
provider's contrib kernel both). The fusion fires only where the provider that takes the nodes
runs the fused op. A DynamicQuantizeLinear read by several products (one per projection of the
same input) fuses into each; it goes when the last one does.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import NodeProto

from turnout.graph.contrib import DOMAIN
from turnout.optimizer.base import Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph, attr
from turnout.optimizer.match import Matcher

__all__ = ["fuse_dynamic_quant_matmul"]

FUSED = "DynamicQuantizeMatMul"
_REPLACED = ("DynamicQuantizeLinear", "MatMulInteger", "Cast", "Mul")


def _scale_mul(g: OptGraph, m: Matcher, mul: NodeProto, cast_out: str, x_scale: str) -> str | None:
    """W_scale, when `mul` multiplies the cast product by Mul(x_scale, W_scale constant)."""
    other = m.other(mul, cast_out)
    s = m.op(other or "", "Mul")
    if s is None or m.only_reader(s.output[0]) is not mul:
        return None
    w_scale = m.other(s, x_scale)
    if w_scale is None or g.const(w_scale) is None:
        return None
    return w_scale


def _fuse_one(g: OptGraph, m: Matcher, dql: NodeProto, mmi: NodeProto) -> bool:
    x_q, x_scale, x_zp = [*dql.output, "", "", ""][:3]
    if len(mmi.input) < 3 or mmi.input[0] != x_q or mmi.input[2] != x_zp:
        return False
    w = g.const(mmi.input[1])
    if w is None or w.ndim != 2 or w.dtype not in (np.uint8, np.int8):
        return False
    w_zp = mmi.input[3] if len(mmi.input) > 3 else ""
    if w_zp and g.const(w_zp) is None:
        return False
    cast = m.only_reader(mmi.output[0], "Cast")
    if cast is None or attr(cast, "to", 0) != onnx.TensorProto.FLOAT:
        return False
    mul = m.only_reader(cast.output[0], "Mul")
    if mul is None:
        return False
    w_scale = _scale_mul(g, m, mul, cast.output[0], x_scale)
    if w_scale is None:
        return False
    scale_node = m.prod[m.other(mul, cast.output[0]) or ""]
    fused = g.make_node(
        FUSED, [dql.input[0], mmi.input[1], w_scale, w_zp], [mul.output[0]], domain=DOMAIN
    )
    g.insert_before(mul, fused)
    m.remove(mmi, cast, mul, scale_node)
    if not any(m.readers(o) for o in dql.output if o) and m.internal(*dql.output):
        m.remove(dql)
    return True


@graph_pass("fuse_dynamic_quant_matmul", Level.EXTENDED)
def fuse_dynamic_quant_matmul(g: OptGraph, ctx: PassContext) -> int:
    """DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(scales) -> DynamicQuantizeMatMul."""
    dqls = [n for n in g.nodes if n.op_type == "DynamicQuantizeLinear" and n.domain == ""]
    if not dqls or not ctx.can_emit(DOMAIN, FUSED, _REPLACED):
        return 0
    changes = 0
    m = Matcher(g)
    for dql in dqls:
        if not dql.output or not m.internal(dql.output[0]):
            continue
        for mmi in list(m.readers(dql.output[0])):
            if mmi.op_type == "MatMulInteger" and mmi.domain == "" and _fuse_one(g, m, dql, mmi):
                changes += 1
        if changes:
            g.ensure_opset(DOMAIN)
    return changes
