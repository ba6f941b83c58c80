"""Extended passes: MatMul+Add (any rank, constant weights) -> FusedGemm, Conv + residual Add
(+ activation) -> FusedConv with input Z, and Conv / Gemm / FusedGemm followed by an activation
(or by SiLU written as y * Sigmoid(y)) -> FusedConv / FusedGemm (domain ai.turnout)."""

from __future__ import annotations

import onnx
from onnx import NodeProto, TensorProto, helper

from turnout.graph.ir import schema_defaults
from turnout.optimizer.base import TURNOUT_DOMAIN, Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph, attr
from turnout.optimizer.match import Matcher

__all__ = ["fuse_activation", "fuse_conv_add_activation", "fuse_matmul_add"]

_FLOATS = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}
_FUSED_ATTRS = ("activation", "activation_params")


def _schema_default(op: str, name: str) -> float:
    """onnx's schema default of an ai.onnx activation's attribute (the fused kernels' table)."""
    return float(schema_defaults("", op, onnx.defs.onnx_opset_version())[name])


@graph_pass("fuse_matmul_add", Level.EXTENDED)
def fuse_matmul_add(g: OptGraph, ctx: PassContext) -> int:
    """MatMul(A[..., K], W[K, N] constant) + bias[N] constant -> ai.turnout::FusedGemm."""
    if not ctx.can_emit(TURNOUT_DOMAIN, "FusedGemm", ("MatMul", "Add")):
        return 0
    changes = 0
    m = Matcher(g)
    for mm in list(g.nodes):
        if mm.op_type != "MatMul" or mm.domain not in ("", "ai.onnx"):
            continue
        add = m.only_reader(mm.output[0], "Add")
        if add is None:
            continue
        w = g.const(mm.input[1])
        bias_name = m.other(add, mm.output[0])
        bias = g.const(bias_name) if bias_name else None
        a = g.shape(mm.input[0])
        if w is None or bias is None or a is None or len(a) < 2 or w.ndim != 2:
            continue
        if g.elem_type(mm.input[0]) not in _FLOATS or bias.dtype != w.dtype:
            continue
        if bias.ndim != 1 or bias.shape[0] != w.shape[1]:
            continue
        fused = g.make_node(
            "FusedGemm", [mm.input[0], mm.input[1], bias_name], [add.output[0]],  # type: ignore[list-item]
            domain=TURNOUT_DOMAIN,
        )  # fmt: skip
        g.insert_before(add, fused)
        g.remove(mm, add)
        changes += 1
    if changes:
        g.ensure_opset(TURNOUT_DOMAIN)
    return changes


def _activation(g: OptGraph, n: NodeProto) -> tuple[str, list[float]] | None:
    """(name, params) of an activation node the fused kernels implement, else None."""
    op = n.op_type
    if n.domain == TURNOUT_DOMAIN and op == "Gelu":
        return ("GeluTanh" if attr(n, "approximate", "none") == "tanh" else "Gelu"), []
    if n.domain not in ("", "ai.onnx"):
        return None
    if op in ("Relu", "Sigmoid", "Tanh"):
        return op, []
    if op == "LeakyRelu":
        return op, [float(attr(n, "alpha", _schema_default(op, "alpha")))]
    if op == "HardSigmoid":
        return op, [float(attr(n, k, _schema_default(op, k))) for k in ("alpha", "beta")]
    if op == "HardSwish":
        return op, []
    if op == "Gelu":
        return ("GeluTanh" if attr(n, "approximate", "none") == "tanh" else "Gelu"), []
    if op == "Clip":
        if len(n.input) == 1 and (attr(n, "min") is not None or attr(n, "max") is not None):
            return op, [float(attr(n, "min", -3.4028234663852886e38)),
                        float(attr(n, "max", 3.4028234663852886e38))]  # fmt: skip
        lo = g.scalar(n.input[1]) if len(n.input) > 1 and n.input[1] else float("-inf")
        hi = g.scalar(n.input[2]) if len(n.input) > 2 and n.input[2] else float("inf")
        if lo is None or hi is None:
            return None
        return op, [lo, hi]
    return None


@graph_pass("fuse_conv_add_activation", Level.EXTENDED)
def fuse_conv_add_activation(g: OptGraph, ctx: PassContext) -> int:
    """Conv -> Add(residual of the same shape) [-> activation] becomes one FusedConv that adds
    its input Z before the activation (ResNet's block tail: one pass over the output, not 3)."""
    changes = 0
    m = Matcher(g)
    gone: set[int] = set()  # nodes fused away in this pass (the matcher does not see removals)
    for n in list(g.nodes):
        if n.op_type != "Conv" or n.domain not in ("", "ai.onnx") or len(n.output) != 1:
            continue
        y = n.output[0]
        add = m.only_reader(y, "Add")
        if add is None or not m.internal(y) or id(add) in gone:
            continue  # (an Add of two convs is fused with the first one only)
        z = m.other(add, y)
        shape = g.shape(y)
        if not z or z == y or shape is None or None in shape or g.shape(z) != shape:
            continue  # Z must have the output's exact (known) shape: no broadcasting
        if g.elem_type(y) not in _FLOATS or g.elem_type(z) != g.elem_type(y):
            continue
        out, act, replaced = add.output[0], None, [n, add]
        reader = m.only_reader(out)
        if reader is not None and m.internal(out):
            act = _activation(g, reader)
            if act is not None:
                out = reader.output[0]
                replaced.append(reader)
        if not ctx.can_emit(TURNOUT_DOMAIN, "FusedConv", tuple(r.op_type for r in replaced)):
            continue
        bias = n.input[2] if len(n.input) > 2 else ""
        fused = g.make_node(
            "FusedConv", [n.input[0], n.input[1], bias, z], [out], domain=TURNOUT_DOMAIN
        )
        fused.attribute.extend(a for a in n.attribute if a.name not in _FUSED_ATTRS)
        if act is not None:
            fused.attribute.append(helper.make_attribute("activation", act[0]))
            if act[1]:
                fused.attribute.append(helper.make_attribute("activation_params", act[1]))
        g.insert_before(replaced[-1], fused)
        g.remove(*replaced)
        gone.update(id(r) for r in replaced)
        changes += 1
    if changes:
        g.ensure_opset(TURNOUT_DOMAIN)
    return changes


@graph_pass("fuse_activation", Level.EXTENDED)
def fuse_activation(g: OptGraph, ctx: PassContext) -> int:
    """Conv/Gemm/FusedGemm -> activation becomes one FusedConv/FusedGemm with that activation;
    y * Sigmoid(y) of the product y (SiLU) becomes activation "Swish"."""
    changes = 0
    m = Matcher(g)
    for n in list(g.nodes):
        is_conv = n.op_type == "Conv" and n.domain in ("", "ai.onnx")
        is_gemm = n.op_type == "Gemm" and n.domain in ("", "ai.onnx")
        is_fgemm = n.op_type == "FusedGemm" and n.domain == TURNOUT_DOMAIN
        if not (is_conv or is_gemm or is_fgemm) or len(n.output) != 1:
            continue
        if is_fgemm and attr(n, "activation", ""):
            continue
        if not m.internal(n.output[0]) or g.elem_type(n.output[0]) not in _FLOATS:
            continue
        reads = m.readers(n.output[0])
        swish = _swish(m, n.output[0])
        act_node: NodeProto | None = None
        act: tuple[str, list[float]] | None = None
        removed: list[NodeProto] = []
        if swish is not None:  # y * Sigmoid(y): the Mul is the activation's output
            act_node, act, removed = swish[1], ("Swish", []), [swish[0]]
        elif len(reads) == 1:
            act_node, act = reads[0], _activation(g, reads[0])
        if act_node is None or act is None:
            continue
        fused_op = "FusedConv" if is_conv else "FusedGemm"
        ops = (n.op_type, *(r.op_type for r in removed), act_node.op_type)
        if not ctx.can_emit(TURNOUT_DOMAIN, fused_op, ops):
            continue
        if is_gemm and g.opsets.get("", 0) < 7:
            continue
        attrs = [a for a in n.attribute if a.name not in _FUSED_ATTRS]
        fused = helper.make_node(
            fused_op, list(n.input), [act_node.output[0]], name=g.fresh(fused_op),
            domain=TURNOUT_DOMAIN,
        )  # fmt: skip
        fused.attribute.extend(attrs)
        fused.attribute.append(helper.make_attribute("activation", act[0]))
        if act[1]:
            fused.attribute.append(helper.make_attribute("activation_params", act[1]))
        g.insert_before(act_node, fused)
        g.remove(n, *removed, act_node)
        changes += 1
    if changes:
        g.ensure_opset(TURNOUT_DOMAIN)
    return changes


def _swish(m: Matcher, y: str) -> tuple[NodeProto, NodeProto] | None:
    """(Sigmoid, Mul) when `y` is read only by s = Sigmoid(y) and Mul(y, s), and s only by
    that Mul: SiLU as exporters write it."""
    reads = m.readers(y)
    if len(reads) != 2:
        return None
    sig = next((r for r in reads if r.op_type == "Sigmoid" and r.domain in ("", "ai.onnx")), None)
    mul = next((r for r in reads if r.op_type == "Mul" and r.domain in ("", "ai.onnx")), None)
    if sig is None or mul is None or sorted(mul.input) != sorted([y, sig.output[0]]):
        return None
    after = m.readers(sig.output[0])
    if len(after) != 1 or after[0] is not mul or not m.internal(sig.output[0]):
        return None
    return sig, mul
