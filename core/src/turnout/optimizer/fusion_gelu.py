"""Extended pass: GELU written out with Erf (or its Tanh approximation) -> one Gelu node
(the standard op at opset >= 20, else ai.turnout::Gelu)."""

from __future__ import annotations

import math

from onnx import NodeProto

from turnout.optimizer.base import TURNOUT_DOMAIN, Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph
from turnout.optimizer.match import Matcher

__all__ = ["fuse_gelu"]


def _near(v: float | None, want: float, tol: float = 1e-3) -> bool:
    return v is not None and abs(v - want) <= tol * abs(want)


def _erf_input(g: OptGraph, m: Matcher, erf: NodeProto) -> tuple[str, list[NodeProto]] | None:
    """x for Erf(x / sqrt(2)) or Erf(x * (1/sqrt(2)))."""
    n = m.op(erf.input[0], "Div", "Mul")
    if n is None or m.only_reader(n.output[0]) is None:
        return None
    if n.op_type == "Div" and _near(g.scalar(n.input[1]), math.sqrt(2)):
        return n.input[0], [n]
    if n.op_type == "Mul":
        for i in (0, 1):
            if _near(g.scalar(n.input[1 - i]), 1 / math.sqrt(2)):
                return n.input[i], [n]
    return None


def _tanh_input(g: OptGraph, m: Matcher, tanh: NodeProto) -> tuple[str, list[NodeProto]] | None:
    """x for Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) (x^3 as Pow(x, 3) or x * x * x)."""
    scale = m.op(tanh.input[0], "Mul")
    if scale is None or m.only_reader(scale.output[0]) is None:
        return None
    for i in (0, 1):
        if not _near(g.scalar(scale.input[1 - i]), math.sqrt(2 / math.pi)):
            continue
        inner = m.op(scale.input[i], "Add")
        if inner is None or m.only_reader(inner.output[0]) is None:
            return None
        for j in (0, 1):
            x, cube_mul = inner.input[j], m.op(inner.input[1 - j], "Mul")
            if cube_mul is None or m.only_reader(cube_mul.output[0]) is None:
                continue
            for k in (0, 1):
                if not _near(g.scalar(cube_mul.input[1 - k]), 0.044715):
                    continue
                cube = m.op(cube_mul.input[k], "Pow", "Mul")
                if cube is None or m.only_reader(cube.output[0]) is None:
                    continue
                if cube.op_type == "Pow" and cube.input[0] == x and g.scalar(cube.input[1]) == 3:
                    return x, [scale, inner, cube_mul, cube]
                if cube.op_type == "Mul":
                    sq = m.op(cube.input[0], "Mul") or m.op(cube.input[1], "Mul")
                    if sq is not None and list(sq.input) == [x, x] and x in cube.input:
                        return x, [scale, inner, cube_mul, cube, sq]
    return None


def _tail(g: OptGraph, m: Matcher, x: str, plus1: NodeProto) -> tuple[str, list[NodeProto]] | None:
    """The output of 0.5 * x * (1 + f) in its usual orderings, given the (1 + f) node."""
    p = plus1.output[0]
    mul = m.only_reader(p, "Mul")
    if mul is None:
        return None
    other = m.other(mul, p)
    if other == x:  # (x * p) * 0.5
        half = m.only_reader(mul.output[0], "Mul")
        if half is not None and _near(g.scalar(m.other(half, mul.output[0]) or ""), 0.5):
            return half.output[0], [mul, half]
        return None
    if _near(g.scalar(other or ""), 0.5):  # x * (p * 0.5)
        outer = m.only_reader(mul.output[0], "Mul")
        if outer is not None and m.other(outer, mul.output[0]) == x:
            return outer.output[0], [mul, outer]
        return None
    h = m.op(other or "", "Mul")  # (x * 0.5) * p
    if h is not None and m.only_reader(h.output[0]) is mul:
        hx = m.other(h, x)
        if hx is not None and _near(g.scalar(hx), 0.5):
            return mul.output[0], [h, mul]
    return None


@graph_pass("fuse_gelu", Level.EXTENDED)
def fuse_gelu(g: OptGraph, ctx: PassContext) -> int:
    """0.5 * x * (1 + erf(x / sqrt(2))) and its tanh approximation -> Gelu."""
    standard = g.opsets.get("", 0) >= 20 and ctx.can_emit("", "Gelu", ("Erf", "Mul", "Add"))
    if not standard and not ctx.can_emit(TURNOUT_DOMAIN, "Gelu", ("Erf", "Mul", "Add")):
        return 0
    domain = "" if standard else TURNOUT_DOMAIN
    changes = 0
    m = Matcher(g)
    for f in list(g.nodes):
        if f.op_type not in ("Erf", "Tanh") or f.domain not in ("", "ai.onnx"):
            continue
        found = _erf_input(g, m, f) if f.op_type == "Erf" else _tanh_input(g, m, f)
        if found is None:
            continue
        x, head = found
        plus1 = m.only_reader(f.output[0], "Add")
        if plus1 is None or g.scalar(m.other(plus1, f.output[0]) or "") != 1.0:
            continue
        tail = _tail(g, m, x, plus1)
        if tail is None:
            continue
        out, rest = tail
        approx = "none" if f.op_type == "Erf" else "tanh"
        gelu = g.make_node("Gelu", [x], [out], domain=domain, approximate=approx)
        g.insert_before(rest[-1], gelu)
        g.remove(*head, f, plus1, *rest)
        if domain:
            g.ensure_opset(domain)
        changes += 1
        m = Matcher(g)
    return changes
