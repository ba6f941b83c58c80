"""Extended passes: decomposed LayerNorm (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add)
-> LayerNormalization (standard at opset >= 17, else ai.turnout), and Add + LayerNormalization
-> ai.turnout::SkipLayerNormalization."""

from __future__ import annotations

from onnx import NodeProto, TensorProto

from turnout.optimizer.base import TURNOUT_DOMAIN, Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph, attr
from turnout.optimizer.match import Matcher

__all__ = ["fuse_layer_norm", "fuse_skip_layer_norm"]

_FLOATS = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
_DECOMPOSED = ("ReduceMean", "Sub", "Pow", "Add", "Sqrt", "Div", "Mul")


def _last_axis_mean(g: OptGraph, n: NodeProto | None, rank: int | None) -> bool:
    if n is None or attr(n, "keepdims", 1) != 1:
        return False
    axes = attr(n, "axes")
    if axes is None and len(n.input) > 1 and n.input[1]:
        c = g.const(n.input[1])
        axes = c.reshape(-1).tolist() if c is not None else None
    if axes is None or len(axes) != 1:
        return False
    return axes[0] == -1 or (rank is not None and axes[0] == rank - 1)


def _layer_norm_op(g: OptGraph, ctx: PassContext) -> tuple[str, str] | None:
    if g.opsets.get("", 0) >= 17 and ctx.can_emit("", "LayerNormalization", _DECOMPOSED):
        return "", "LayerNormalization"
    if ctx.can_emit(TURNOUT_DOMAIN, "LayerNormalization", _DECOMPOSED):
        return TURNOUT_DOMAIN, "LayerNormalization"
    return None


@graph_pass("fuse_layer_norm", Level.EXTENDED)
def fuse_layer_norm(g: OptGraph, ctx: PassContext) -> int:
    """(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * gamma + beta -> LayerNormalization."""
    target = _layer_norm_op(g, ctx)
    if target is None:
        return 0
    changes = 0
    m = Matcher(g)
    for mean1 in list(g.nodes):
        if mean1.op_type != "ReduceMean" or mean1.domain not in ("", "ai.onnx"):
            continue
        x = mean1.input[0]
        shape = g.shape(x)
        rank = len(shape) if shape is not None else None
        if not _last_axis_mean(g, mean1, rank) or g.elem_type(x) not in _FLOATS:
            continue
        sub = m.only_reader(mean1.output[0], "Sub")
        if sub is None or list(sub.input) != [x, mean1.output[0]]:
            continue
        d = sub.output[0]
        d_reads = m.readers(d)
        pow_ = next((r for r in d_reads if r.op_type in ("Pow", "Mul")), None)
        div = next((r for r in d_reads if r.op_type == "Div" and r.input[0] == d), None)
        if pow_ is None or div is None or len(d_reads) != 2 or not m.internal(d):
            continue
        if pow_.op_type == "Pow" and g.scalar(pow_.input[1]) != 2.0:
            continue
        if pow_.op_type == "Mul" and list(pow_.input) != [d, d]:
            continue
        mean2 = m.only_reader(pow_.output[0], "ReduceMean")
        if mean2 is None or not _last_axis_mean(g, mean2, rank):
            continue
        add_eps = m.only_reader(mean2.output[0], "Add")
        eps_name = m.other(add_eps, mean2.output[0]) if add_eps is not None else None
        eps = g.scalar(eps_name) if eps_name else None
        if add_eps is None or eps is None:
            continue
        sqrt = m.only_reader(add_eps.output[0], "Sqrt")
        if sqrt is None or div.input[1] != sqrt.output[0] or len(m.readers(sqrt.output[0])) != 1:
            continue
        mul = m.only_reader(div.output[0], "Mul")
        gamma_name = m.other(mul, div.output[0]) if mul is not None else None
        gamma = g.const(gamma_name) if gamma_name else None
        if mul is None or gamma is None or gamma.ndim != 1:
            continue
        removed = [mean1, sub, pow_, mean2, add_eps, sqrt, div, mul]
        inputs = [x, gamma_name]
        out = mul.output[0]
        add_b = m.only_reader(out, "Add")
        beta_name = m.other(add_b, out) if add_b is not None else None
        beta = g.const(beta_name) if beta_name else None
        if add_b is not None and beta is not None and beta.ndim == 1:
            removed.append(add_b)
            inputs.append(beta_name)
            out = add_b.output[0]
        domain, op = target
        ln = g.make_node(op, inputs, [out], domain=domain, axis=-1, epsilon=float(eps))
        g.insert_before(removed[-1], ln)
        g.remove(*removed)
        if domain:
            g.ensure_opset(domain)
        changes += 1
        m = Matcher(g)
    return changes


@graph_pass("fuse_skip_layer_norm", Level.EXTENDED)
def fuse_skip_layer_norm(g: OptGraph, ctx: PassContext) -> int:
    """Add(a, b) (same shapes) -> LayerNormalization(last axis) -> SkipLayerNormalization."""
    changes = 0
    m = Matcher(g)
    for ln in list(g.nodes):
        if ln.op_type != "LayerNormalization" or ln.domain not in ("", "ai.onnx", TURNOUT_DOMAIN):
            continue
        if len([o for o in ln.output if o]) != 1 or attr(ln, "axis", -1) not in (-1, 2):
            continue
        add = m.op(ln.input[0], "Add")
        if add is None or len(add.input) != 2:
            continue
        sa, sb = g.shape(add.input[0]), g.shape(add.input[1])
        if sa is None or sa != sb or None in sa or len(sa) != 3 or not m.internal(ln.input[0]):
            continue
        if not ctx.can_emit(TURNOUT_DOMAIN, "SkipLayerNormalization", ("Add", ln.op_type)):
            continue
        gamma = ln.input[1]
        beta = ln.input[2] if len(ln.input) > 2 else ""
        if g.const(gamma) is None or g.const(gamma).ndim != 1:  # type: ignore[union-attr]
            continue
        outputs = [ln.output[0]]
        if len(m.readers(add.output[0])) > 1:
            outputs += ["", "", add.output[0]]
        skip = g.make_node(
            "SkipLayerNormalization", [add.input[0], add.input[1], gamma, beta], outputs,
            domain=TURNOUT_DOMAIN, epsilon=float(attr(ln, "epsilon", 1e-5)),
        )  # fmt: skip
        g.insert_before(add, skip)
        g.remove(add, ln)
        g.ensure_opset(TURNOUT_DOMAIN)
        changes += 1
        m = Matcher(g)
    return changes
