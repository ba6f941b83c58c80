"""Extended pass: multi-head attention written out as
Reshape/Transpose(q, k, v) -> MatMul -> scale -> (+ mask) -> Softmax -> MatMul -> Transpose ->
Reshape, fused into ai.turnout::Attention(q, k, v, mask) over the projected [B, S, H*D] values.
Works with symbolic batch and sequence dims: only the head dims must be static."""

from __future__ import annotations

from onnx import NodeProto, TensorProto

from turnout.optimizer.base import TURNOUT_DOMAIN, Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph, attr
from turnout.optimizer.match import Matcher

__all__ = ["fuse_attention"]

_FLOATS = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}


def _perm(n: NodeProto) -> list[int]:
    return [int(x) for x in attr(n, "perm", [])]


def _heads(
    g: OptGraph, m: Matcher, t: NodeProto | None, perm: list[int]
) -> tuple[str, int, int, list[NodeProto]] | None:
    """(projected input, heads, head_dim, nodes) for Transpose(perm) of Reshape(x, [B,S,H,D])."""
    if t is None or _perm(t) != perm or m.only_reader(t.output[0]) is None:
        return None
    r = m.op(t.input[0], "Reshape")
    if r is None or m.only_reader(r.output[0]) is not t or len(r.input) < 2:
        return None
    src, out = g.shape(r.input[0]), g.shape(r.output[0])
    if src is None or out is None or len(src) != 3 or len(out) != 4:
        return None
    h, d = out[2], out[3]
    if not isinstance(h, int) or not isinstance(d, int) or src[2] != h * d:
        return None
    target = g.const(r.input[1])
    keeps_bs = target is not None and target.size == 4 and list(target[:2]) == [0, 0]
    if not keeps_bs and not (out[0] == src[0] and out[1] == src[1] and None not in out[:2]):
        return None
    return r.input[0], h, d, [r, t]


@graph_pass("fuse_attention", Level.EXTENDED)
def fuse_attention(g: OptGraph, ctx: PassContext) -> int:
    """softmax(Q K^T * scale + mask) V with head split/merge -> ai.turnout::Attention."""
    ops = ("Reshape", "Transpose", "MatMul", "Mul", "Add", "Softmax")
    if not ctx.can_emit(TURNOUT_DOMAIN, "Attention", ops):
        return 0
    changes = 0
    m = Matcher(g)
    for sm in list(g.nodes):
        if sm.op_type != "Softmax" or sm.domain not in ("", "ai.onnx"):
            continue
        if attr(sm, "axis", -1 if g.opsets.get("", 0) >= 13 else 1) not in (-1, 3):
            continue
        if g.elem_type(sm.input[0]) not in _FLOATS:
            continue
        removed: list[NodeProto] = [sm]
        scores = sm.input[0]
        mask = ""
        add = m.op(scores, "Add")
        if add is not None and m.only_reader(add.output[0]) is sm:
            for i in (0, 1):
                if m.op(add.input[i], "Mul", "Div", "MatMul") is not None:
                    scores, mask = add.input[i], add.input[1 - i]
                    removed.append(add)
                    break
        scale = 1.0
        sc = m.op(scores, "Mul", "Div")
        if sc is not None and m.only_reader(sc.output[0]) is not None:
            for i in (0, 1) if sc.op_type == "Mul" else (0,):
                c = g.scalar(sc.input[1 - i])
                if c is not None and m.op(sc.input[i], "MatMul") is not None:
                    scale = c if sc.op_type == "Mul" else 1.0 / c
                    scores = sc.input[i]
                    removed.append(sc)
                    break
        qk = m.op(scores, "MatMul")
        if qk is None or m.only_reader(qk.output[0]) is None:
            continue
        q = _heads(g, m, m.op(qk.input[0], "Transpose"), [0, 2, 1, 3])
        k = _heads(g, m, m.op(qk.input[1], "Transpose"), [0, 2, 3, 1])
        pv = m.only_reader(sm.output[0], "MatMul")
        if q is None or k is None or pv is None or pv.input[0] != sm.output[0]:
            continue
        v = _heads(g, m, m.op(pv.input[1], "Transpose"), [0, 2, 1, 3])
        t_out = m.only_reader(pv.output[0], "Transpose")
        if v is None or t_out is None or _perm(t_out) != [0, 2, 1, 3]:
            continue
        r_out = m.only_reader(t_out.output[0], "Reshape")
        if r_out is None:
            continue
        heads, dim = q[1], q[2]
        if (k[1], k[2]) != (heads, dim) or (v[1], v[2]) != (heads, dim):
            continue
        final = g.shape(r_out.output[0])
        target = g.const(r_out.input[1]) if len(r_out.input) > 1 else None
        merged = final is not None and len(final) == 3 and final[2] == heads * dim
        if not merged or target is None or target.size != 3:
            continue
        src = g.shape(t_out.output[0])
        if list(target[:2]) != [0, 0] and (src is None or list(final[:2]) != list(src[:2])):  # type: ignore[index]
            continue
        inputs = [q[0], k[0], v[0]] + ([mask] if mask else [])
        fused = g.make_node(
            "Attention", inputs, [r_out.output[0]], domain=TURNOUT_DOMAIN,
            num_heads=heads, scale=float(scale),
        )  # fmt: skip
        g.insert_before(r_out, fused)
        g.remove(*removed, qk, *q[3], *k[3], pv, *v[3], t_out, r_out)
        g.ensure_opset(TURNOUT_DOMAIN)
        changes += 1
        m = Matcher(g)
    return changes
