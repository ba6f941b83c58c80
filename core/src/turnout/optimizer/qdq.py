"""Extended pass: QDQ node units -> integer ops, as onnxruntime's QDQ selector-action transformer
folds them.

    DQ(x_q) ─┐
    DQ(w_q) ─┼─ Conv ─ Q ─► y_q    =>  QLinearConv(x_q, x_s, x_zp, w_q, w_s, w_zp, y_s, y_zp, b_q)
    DQ(b_q) ─┘  (bias optional)
    DQ(a_q), DQ(b_q) ─ MatMul ─ Q  =>  QLinearMatMul(a_q, a_s, a_zp, b_q, b_s, b_zp, y_s, y_zp)

The integer op computes the same sum exactly in int32 and requantizes once, where the QDQ form
rounds the dequantized products in float; both round to the same quantized output except for
sums that land within float rounding of a half step (one step apart then). A unit folds only
where that stays true:
- activations and weights are uint8/int8 (the Q's output too), scales and zero points are
  constants, per tensor except the weight's (per output channel for Conv: axis 0, per column
  for a 2-D MatMul weight: its last axis), no blocked quantization;
- the int32 sum cannot overflow (K times the largest |x - x_zp| times the largest |w - w_zp|,
  plus the bias, below 2^31);
- a Conv bias is the dequantization of an int32 constant with zero point 0 and scale
  x_scale * w_scale (QLinearConv adds the int32 bias to the sum, with that scale implied);
- the float result is read only by the Q, and is no graph output;
- B is a constant: a product of two activations (attention's) stays in float, where it runs
  faster than as an 8-bit product (4 heads of 64 x 64 x 64: 49 against 66 us, measured).

The same units around Add and Mul (both inputs dequantized, one type for A, B and the output)
become com.microsoft QLinearAdd / QLinearMul, and around Softmax QLinearSoftmax, as
onnxruntime's QDQ transformer makes them; their float32 arithmetic rounds once where the QDQ
form rounds twice (one step apart at most).
A DQ another node still reads stays for that reader.

A second pattern is a chain of element-wise float ops between a DequantizeLinear and a
QuantizeLinear, each reading only the one before (and constant scalars), as QOperator models
keep GELU's `Div -> Erf`:

    DQ(x_q) ─ Div(c) ─ Erf ─ Q ─► y_q   =>  Gather(table, Cast(x_q, int32))

The output is a function of the input's code alone, so a chain with an op that has no
vectorized float form (erf: `_TABLE_WORTH`) is evaluated once for all 256 codes (turnout's
numpy kernels, as constant folding evaluates) into a table of output codes, indexed by the
input's byte (an int8 code's negative index reads the table from its end, which is where its
byte puts it). Each code's result is the chain's own in float32 then quantized: equal to the
unfolded graph's except where a kernel's float rounding differs across a half step (one step
then). Chains of cheap ops stay: their fused float pass is faster than the lookup's two.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import NodeProto

from turnout.optimizer.base import Level, PassContext, graph_pass
from turnout.optimizer.evaluate import evaluate_nodes
from turnout.optimizer.graph import OptGraph, attr
from turnout.optimizer.match import Matcher

__all__ = ["fold_qdq", "unit_dequantizers"]

_TABLE_UNARY = frozenset({
    "Abs", "Ceil", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish",
    "LeakyRelu", "Log", "Mish", "Neg", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid",
    "Sign", "Softplus", "Softsign", "Sqrt", "Tanh", "ThresholdedRelu",
})  # fmt: skip
"""Element-wise float ops of one input the table fold evaluates."""
_TABLE_BINARY = frozenset({"Add", "Div", "Max", "Min", "Mul", "Pow", "Sub"})
"""Element-wise ops whose other input must be a constant scalar for the table fold."""
_TABLE_WORTH = frozenset({"Erf", "Gelu"})
"""The ops that make a table worth its two passes (Cast, Gather): a fused float chain of the
other ops is one vectorized pass, 3-4x faster than the lookup on (1, 64, 1024) int8 tensors,
while erf has no vectorized form (7x slower than the lookup)."""

EIGHT_BIT = (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)
_NP: dict[int, Any] = {onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT8: np.int8}
_INT32_LIMIT = 2**31 - 1


class _Quant:
    """One DequantizeLinear/QuantizeLinear's parameters: the quantized value's name, the scale
    and zero point (names and constant values), its element type and axis."""

    def __init__(self, g: OptGraph, n: NodeProto, value: str) -> None:
        self.node = n
        self.value = value
        self.scale_name = n.input[1] if len(n.input) > 1 else ""
        self.zp_name = n.input[2] if len(n.input) > 2 else ""
        self.scale = g.const(self.scale_name)
        self.zp = g.const(self.zp_name) if self.zp_name else None
        self.axis = int(attr(n, "axis", 1))
        self.blocked = int(attr(n, "block_size", 0)) != 0
        self.elem = g.elem_type(value)

    def usable(self) -> bool:
        ok = self.scale is not None and self.elem in EIGHT_BIT and not self.blocked
        return ok and (not self.zp_name or self.zp is not None)

    def per_tensor(self) -> bool:
        return (
            self.scale is not None
            and self.scale.size == 1
            and (self.zp is None or self.zp.size == 1)
        )

    def zero(self) -> np.ndarray:
        """The zero point as an array (0 of the quantized type when absent)."""
        if self.zp is not None:
            return self.zp
        return np.zeros(1 if self.scale is None else self.scale.shape, _NP[self.elem or 2])

    def widest(self) -> int:
        """The largest |q - zp| a value of this type can have."""
        info = np.iinfo(_NP[self.elem or 2])
        z = self.zero().astype(np.int64)
        return int(max(np.max(info.max - z), np.max(z - info.min)))


def _zp_input(g: OptGraph, q: _Quant) -> str:
    """The zero point's name, an int8/uint8 zero made for it when the DQ/Q has none."""
    if q.zp_name:
        return q.zp_name
    return g.add_init(
        np.zeros(q.scale.shape if q.scale is not None else (), _NP[q.elem or 2]), "zp"
    )


def _dq(g: OptGraph, m: Matcher, name: str) -> _Quant | None:
    n = m.op(name, "DequantizeLinear")
    if n is None:
        return None
    q = _Quant(g, n, n.input[0])
    return q if q.usable() else None


def _per_axis(q: _Quant, w: np.ndarray, axis: int) -> bool:
    """Whether a weight's scale is per tensor or per `axis` (its zero point the same way)."""
    if q.per_tensor():
        return True
    if q.scale is None or q.scale.ndim != 1 or q.axis % w.ndim != axis % w.ndim:
        return False
    n = w.shape[axis]
    return q.scale.size == n and (q.zp is None or q.zp.shape == q.scale.shape)


def _sum_bound(x: _Quant, w: _Quant, wv: np.ndarray, k: int) -> int:
    """An upper bound of |sum over K of (x - x_zp)(w - w_zp)|."""
    wz = w.zero().astype(np.int64)
    if wz.size > 1:  # per channel along axis 0 (Conv) or the last axis (MatMul)
        wz = wz.reshape(-1, *([1] * (wv.ndim - 1))) if w.axis % wv.ndim == 0 else wz
    return k * x.widest() * int(np.max(np.abs(wv.astype(np.int64) - wz), initial=0))


def _bias(g: OptGraph, m: Matcher, conv: NodeProto, x: _Quant, w: _Quant) -> NodeProto | None:
    """The DequantizeLinear of a Conv's bias when QLinearConv can take its int32 input: zero
    point 0, scale x_scale * w_scale (per tensor or per output channel)."""
    n = m.op(conv.input[2], "DequantizeLinear")
    if n is None or len(n.input) < 2:
        return None
    b = g.const(n.input[0])
    s = g.const(n.input[1])
    zp = g.const(n.input[2]) if len(n.input) > 2 and n.input[2] else None
    if b is None or s is None or b.dtype != np.int32 or b.ndim != 1:
        return None
    if (zp is not None and np.any(zp != 0)) or (s.size > 1 and int(attr(n, "axis", 1)) != 0):
        return None
    assert x.scale is not None and w.scale is not None
    implied = x.scale.astype(np.float32).reshape(()) * w.scale.astype(np.float32).reshape(-1)
    given = s.astype(np.float32).reshape(-1)
    if given.size not in (1, implied.size) and implied.size != 1:
        return None
    return n if np.allclose(given, implied, rtol=1e-6, atol=0) else None


def _fold(g: OptGraph, m: Matcher, n: NodeProto, ctx: PassContext) -> bool:
    conv = n.op_type == "Conv"
    op = "QLinearConv" if conv else "QLinearMatMul"
    if len(n.input) < 2:
        return False
    qn = m.only_reader(n.output[0], "QuantizeLinear")
    if qn is None or not m.internal(n.output[0]):
        return False
    y = _Quant(g, qn, qn.output[0])
    x = _dq(g, m, n.input[0])
    w = _dq(g, m, n.input[1])
    if x is None or w is None or not y.usable() or not x.per_tensor() or not y.per_tensor():
        return False
    wv = g.const(w.value)
    if wv is None:  # (activations times activations stay: DQ -> MatMul -> Q, float32 BLAS, is
        return False  # faster than the 8-bit product of attention's small matrices)
    if conv:
        if not _per_axis(w, wv, 0):
            return False
        k = int(np.prod(wv.shape[1:]))
        dq_b = _bias(g, m, n, x, w) if len(n.input) > 2 and n.input[2] else None
        if len(n.input) > 2 and n.input[2] and dq_b is None:
            return False
        bias = str(dq_b.input[0]) if dq_b is not None else ""
        b = g.const(bias) if bias else None
        extra = int(np.max(np.abs(b.astype(np.int64)), initial=0)) if b is not None else 0
    else:
        if wv.ndim != 2 or not _per_axis(w, wv, -1):
            return False
        k, bias, extra, dq_b = wv.shape[0], "", 0, None
    if _sum_bound(x, w, wv, k) + extra >= _INT32_LIMIT:
        return False
    if not ctx.can_emit("", op, (n.op_type, "DequantizeLinear", "QuantizeLinear")):
        return False
    inputs = [
        x.value, x.scale_name, _zp_input(g, x),
        w.value, w.scale_name, _zp_input(g, w),
        y.scale_name, _zp_input(g, y),
    ]  # fmt: skip
    if bias:
        inputs.append(bias)
    attrs: dict[str, Any] = {}
    if conv:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    new = g.make_node(op, inputs, [y.value], name=n.name or op, **attrs)
    g.insert_before(n, new)
    m.remove(n, qn)
    _drop_unread(g, m, x.node, w.node, dq_b)
    return True


def _scalar_chain(
    g: OptGraph, m: Matcher, dq: NodeProto, first: NodeProto
) -> list[NodeProto] | None:
    """The element-wise nodes from `first` (a reader of `dq`'s output, which others may read
    too) to the QuantizeLinear that ends them (that Q last), each later value read by the next
    node only; None where the chain is anything else."""
    chain: list[NodeProto] = []
    cur = str(dq.output[0])
    while len(chain) < 16:
        n = first if not chain else m.only_reader(cur)
        if n is None or not m.internal(cur) or len(n.output) != 1:
            return None
        if n.domain not in ("", "ai.onnx"):
            return None
        if n.op_type == "QuantizeLinear":
            return [*chain, n] if chain and n.input[0] == cur else None
        if n.op_type in _TABLE_UNARY:
            if list(n.input) != [cur]:
                return None
        elif n.op_type == "Clip":
            bounds = [g.const(x) for x in n.input[1:] if x]
            if n.input[0] != cur or any(b is None or b.size != 1 for b in bounds):
                return None
        elif n.op_type in _TABLE_BINARY:
            other = m.other(n, cur)
            c = g.const(other) if other and other != cur else None
            if c is None or c.size != 1 or c.ndim > min(1, _rank(g, cur)):
                return None  # (a 1-element constant of a higher rank would add axes)
        else:
            return None
        chain.append(n)
        cur = str(n.output[0])
    return None


def _rank(g: OptGraph, name: str) -> int:
    """The rank inferred for `name`, 0 when unknown."""
    tp = g.types.get(name)
    if (
        tp is None
        or tp.WhichOneof("value") != "tensor_type"
        or not tp.tensor_type.HasField("shape")
    ):
        return 0
    return len(tp.tensor_type.shape.dim)


def _table(
    g: OptGraph, dq: NodeProto, chain: list[NodeProto], ctx: PassContext
) -> np.ndarray | None:
    """The chain's quantized output for each of the 256 input codes (index: the code's byte),
    evaluated with the caller's evaluator (turnout's numpy kernels); None when that fails."""
    elem = g.elem_type(str(dq.input[0]))
    codes = np.arange(256, dtype=np.uint8).view(_NP[elem or 2])
    start = NodeProto()
    start.CopyFrom(dq)
    start.input[0] = g.fresh("codes")
    out = evaluate_nodes(g, [start, *chain], {start.input[0]: codes}, ctx)
    if out is None:
        return None
    table = out.get(str(chain[-1].output[0]))
    return table if table is not None and table.shape == (256,) else None


def _fold_table(g: OptGraph, m: Matcher, dq: NodeProto, ctx: PassContext) -> bool:
    if dq.domain not in ("", "ai.onnx") or g.elem_type(str(dq.input[0])) not in EIGHT_BIT:
        return False
    x = _Quant(g, dq, dq.input[0])
    if not x.usable() or not x.per_tensor():
        return False
    for first in list(m.readers(str(dq.output[0]))):
        chain = _scalar_chain(g, m, dq, first)
        if chain is not None and _table_unit(g, m, dq, x, chain, ctx):
            return True
    return False


def _table_unit(
    g: OptGraph, m: Matcher, dq: NodeProto, x: _Quant, chain: list[NodeProto], ctx: PassContext
) -> bool:
    qn = chain[-1]
    y = _Quant(g, qn, qn.output[0])
    if not y.usable() or not y.per_tensor() or not any(n.op_type in _TABLE_WORTH for n in chain):
        return False
    replaced = (*(n.op_type for n in chain), "DequantizeLinear")
    if not all(ctx.can_emit("", op, replaced) for op in ("Cast", "Gather")):
        return False
    table = _table(g, dq, chain, ctx)
    if table is None:
        return False
    idx = g.fresh(f"{qn.output[0]}_code")
    cast = g.make_node("Cast", [x.value], [idx], name=f"{dq.name}_code", to=onnx.TensorProto.INT32)
    look = g.make_node("Gather", [g.add_init(table, "table"), idx], [y.value], name=qn.name, axis=0)
    g.insert_before(chain[0], cast)
    g.insert_before(chain[0], look)
    m.remove(*chain)
    _drop_unread(g, m, dq)
    return True


def _drop_unread(g: OptGraph, m: Matcher, *dqs: NodeProto | None) -> None:
    """Remove the DequantizeLinear nodes no node reads any more."""
    for d in dqs:
        if (
            d is not None
            and not m.readers(d.output[0])
            and m.internal(d.output[0])
            and any(d is r for r in g.nodes)  # (one DQ may feed a unit twice)
        ):
            m.remove(d)


def _unit_ends(g: OptGraph, m: Matcher, n: NodeProto) -> tuple[list[_Quant], _Quant] | None:
    """The per-tensor DQs feeding every input of `n` and the Q that alone reads its output,
    all of one 8-bit type; None where `n` is no such unit."""
    qn = m.only_reader(n.output[0], "QuantizeLinear")
    if qn is None or not m.internal(n.output[0]) or len(n.output) != 1:
        return None
    y = _Quant(g, qn, qn.output[0])
    ins = [_dq(g, m, x) for x in n.input]
    if not y.usable() or not y.per_tensor() or not ins:
        return None
    if any(q is None or not q.per_tensor() or q.elem != y.elem for q in ins):
        return None
    return [q for q in ins if q is not None], y


def _fold_contrib(g: OptGraph, m: Matcher, n: NodeProto, ctx: PassContext) -> bool:
    """DQ -> Add/Mul/Softmax -> Q as com.microsoft QLinearAdd/QLinearMul/QLinearSoftmax."""
    from turnout.graph.contrib import DOMAIN

    ends = _unit_ends(g, m, n)
    if ends is None:
        return False
    ins, y = ends
    op = f"QLinear{n.op_type}"
    attrs: dict[str, Any] = {}
    if n.op_type == "Softmax":
        version = int(g.opsets.get("", 13))
        attrs = {"axis": int(attr(n, "axis", -1 if version >= 13 else 1)), "opset": version}
    elif len(ins) != 2:
        return False
    if not ctx.can_emit(DOMAIN, op, (n.op_type, "DequantizeLinear", "QuantizeLinear")):
        return False
    inputs = [v for q in ins for v in (q.value, q.scale_name, _zp_input(g, q))]
    inputs += [y.scale_name, _zp_input(g, y)]
    g.ensure_opset(DOMAIN)
    new = g.make_node(op, inputs, [y.value], name=n.name or op, domain=DOMAIN, **attrs)
    g.insert_before(n, new)
    m.remove(n, y.node)
    _drop_unread(g, m, *(q.node for q in ins))
    return True


def unit_dequantizers(g: OptGraph) -> set[int]:
    """The ids of the DequantizeLinear nodes that feed a Conv or MatMul whose output only a
    QuantizeLinear reads, or an Add/Mul unit `fold_qdq` folds (a bias or scale constant):
    constant folding leaves them (as onnxruntime's skips DQ nodes), so that `fold_qdq` still
    sees the unit's quantized weight or constant."""
    if not any(n.op_type == "QuantizeLinear" for n in g.nodes):
        return set()
    m = Matcher(g)
    out: set[int] = set()
    for n in g.nodes:
        if n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type in ("Add", "Mul"):
            ends = _unit_ends(g, m, n)
            if ends is not None and len(ends[0]) == 2:
                out.update(id(q.node) for q in ends[0])
            continue
        if n.op_type not in ("Conv", "MatMul"):
            continue
        if m.only_reader(n.output[0], "QuantizeLinear") is None:
            continue
        for x in n.input:
            d = m.op(x, "DequantizeLinear")
            if d is not None:
                out.add(id(d))
    return out


@graph_pass("fold_qdq", Level.EXTENDED)
def fold_qdq(g: OptGraph, ctx: PassContext) -> int:
    """DequantizeLinear -> Conv/MatMul -> QuantizeLinear -> QLinearConv/QLinearMatMul; around
    Add/Mul/Softmax -> com.microsoft QLinearAdd/QLinearMul/QLinearSoftmax; DequantizeLinear ->
    element-wise chain -> QuantizeLinear -> a table lookup."""
    if not any(n.op_type == "QuantizeLinear" for n in g.nodes):
        return 0
    changes = 0
    m = Matcher(g)
    for n in list(g.nodes):
        if n.op_type in ("Conv", "MatMul") and n.domain in ("", "ai.onnx") and _fold(g, m, n, ctx):
            changes += 1
            m = Matcher(g)
    for n in list(g.nodes):
        std = n.domain in ("", "ai.onnx") and any(n is r for r in g.nodes)
        if std and n.op_type in ("Add", "Mul", "Softmax") and _fold_contrib(g, m, n, ctx):
            changes += 1
            m = Matcher(g)
    for n in list(g.nodes):
        alive = n.op_type == "DequantizeLinear" and any(n is r for r in g.nodes)
        if alive and _fold_table(g, m, n, ctx):
            changes += 1
            m = Matcher(g)
    return changes
