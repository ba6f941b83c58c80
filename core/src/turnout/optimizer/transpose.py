"""Basic passes on Transpose: merge consecutive ones (dropping those that cancel) and push a
Transpose through a unary element-wise op towards another Transpose it can cancel against."""

from __future__ import annotations

from turnout.optimizer.base import Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph, attr
from turnout.optimizer.match import Matcher

__all__ = ["merge_transposes", "push_transposes"]

_UNARY = frozenset(
    {
        "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt", "Erf",
        "Elu", "Selu", "HardSigmoid", "Softplus", "Softsign", "Ceil", "Floor", "Round",
        "Reciprocal", "Sin", "Cos", "Cast", "Clip", "Identity", "Sign", "Not", "Gelu",
    }
)  # fmt: skip


def _perm(n: object, rank: int | None) -> list[int] | None:
    p = attr(n, "perm")  # type: ignore[arg-type]
    if p is not None:
        return [int(x) for x in p]
    return list(range(rank))[::-1] if rank is not None else None


def _rank(g: OptGraph, name: str) -> int | None:
    s = g.shape(name)
    return len(s) if s is not None else None


@graph_pass("merge_transposes", Level.BASIC)
def merge_transposes(g: OptGraph, ctx: PassContext) -> int:
    """Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2]), or x when that is identity."""
    changes = 0
    m = Matcher(g)
    for t2 in list(g.nodes):
        if t2.op_type != "Transpose" or t2.domain not in ("", "ai.onnx"):
            continue
        t1 = m.op(t2.input[0], "Transpose")
        if t1 is None:
            continue
        p1, p2 = _perm(t1, _rank(g, t1.input[0])), _perm(t2, _rank(g, t2.input[0]))
        if p1 is None or p2 is None or len(p1) != len(p2):
            continue
        composed = [p1[i] for i in p2]
        if composed == list(range(len(composed))):
            if not g.replace_value(t2.output[0], t1.input[0]):
                continue
            g.remove(t2)
        else:
            t2.input[0] = t1.input[0]
            del t2.attribute[:]
            from onnx import helper

            t2.attribute.append(helper.make_attribute("perm", composed))
        changes += 1
        m = Matcher(g)
    return changes


@graph_pass("push_transposes", Level.BASIC)
def push_transposes(g: OptGraph, ctx: PassContext) -> int:
    """Transpose -> unary op -> Transpose becomes unary op -> Transpose -> Transpose (which
    merge_transposes then cancels), when the first Transpose feeds only the unary op."""
    changes = 0
    m = Matcher(g)
    for u in list(g.nodes):
        if u.op_type not in _UNARY or u.domain not in ("", "ai.onnx") or len(u.output) != 1:
            continue
        if any(x for x in u.input[1:]) and u.op_type != "Clip":
            continue
        t = m.op(u.input[0], "Transpose")
        if t is None or m.only_reader(t.output[0]) is None:
            continue
        after = m.readers(u.output[0])
        if len(after) != 1 or after[0].op_type != "Transpose" or u.output[0] in g.protected:
            continue
        if u.op_type == "Clip" and any(
            x and (s := g.shape(x)) is not None and len(s) > 0 for x in u.input[1:]
        ):
            continue
        # u(t(x)) == t(u(x)): u reads x, t reads u's result; t's output keeps u's old name
        x, mid, out = t.input[0], t.output[0], u.output[0]
        u.input[0] = x
        u.output[0] = mid
        t.input[0] = mid
        t.output[0] = out
        g.forget_type(mid)
        g.remove(t)
        g.insert_before(after[0], t)
        changes += 1
        m = Matcher(g)
    return changes
