"""QOperator format: a QDQ model's DequantizeLinear -> op -> QuantizeLinear units rewritten as
QLinear* operators, the node types onnxruntime's quantize_static writes for
`quant_format=QuantFormat.QOperator`.

The static quantizer first writes QDQ (so both formats share planning, calibration and the
integers); `to_qoperator` then replaces each op whose float inputs all come from
DequantizeLinear and whose outputs each feed one QuantizeLinear by its QLinear form, reading
the quantized tensors, scales and zero points those Q/DQ nodes held. A Q/DQ node nobody reads
any more is removed, so what stays is a QuantizeLinear where float data enters a quantized run
and a DequantizeLinear where a float reader (or a graph output) leaves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from turnout.tools.quantization.graph import GraphEditor
from turnout.tools.quantization.params import QuantParams, quantize_array

__all__ = ["QLINEAR_FORMS", "to_qoperator"]

MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class QLinearForm:
    """How an op is written in QOperator format: `op_type` in `domain`; `inputs` the float
    inputs read as (q, scale, zero point) triples (None: every input, for Concat); `bias` the
    input read as the int32 bias; `drop` attributes the QLinear op does not take; `extra` the
    attributes it adds."""

    op_type: str
    domain: str = MS_DOMAIN
    inputs: tuple[int, ...] | None = (0,)
    bias: int | None = None
    drop: tuple[str, ...] = ()
    extra: tuple[tuple[str, int], ...] = ()


QLINEAR_FORMS: dict[str, QLinearForm] = {
    "Conv": QLinearForm("QLinearConv", "", (0, 1), bias=2),
    "MatMul": QLinearForm("QLinearMatMul", "", (0, 1)),
    "Gemm": QLinearForm("QGemm", inputs=(0, 1), bias=2, drop=("beta",)),
    "Add": QLinearForm("QLinearAdd", inputs=(0, 1)),
    "Mul": QLinearForm("QLinearMul", inputs=(0, 1)),
    "AveragePool": QLinearForm("QLinearAveragePool"),
    "GlobalAveragePool": QLinearForm("QLinearGlobalAveragePool", extra=(("channels_last", 0),)),
    "Sigmoid": QLinearForm("QLinearSigmoid"),
    "LeakyRelu": QLinearForm("QLinearLeakyRelu"),
    "Softmax": QLinearForm("QLinearSoftmax"),
    "Concat": QLinearForm("QLinearConcat", inputs=None),
    "Where": QLinearForm("QLinearWhere", inputs=(1, 2)),  # the condition is read as it is
}
"""Ops with a QLinear form; the ops of `_DIRECT` run on the quantized values as they are."""

_DIRECT = frozenset(
    (
        "MaxPool",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Transpose",
        "Split",
        "Resize",
        "Gather",
    )
)
_WEIGHTED = ("Conv", "MatMul", "Gemm")  # input 1 may be quantized per channel


class _Rewriter:
    def __init__(self, editor: GraphEditor) -> None:
        self.ed = editor
        graph = editor.graph
        self.producer = {out: n for n in graph.node for out in n.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
        self.absorbed: list[onnx.NodeProto] = []  # output Qs whose work the new ops do
        self.before: list[onnx.NodeProto] = []  # nodes the next rewritten op reads
        self.opset = next(
            (o.version for o in editor.model.opset_import if o.domain in ("", "ai.onnx")), 0
        )

    def dequantized(self, name: str, axis_ok: bool = False) -> list[str] | None:
        """(q, scale, zero point) of the DequantizeLinear writing `name`, or None."""
        dq = self.producer.get(name)
        if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx"):
            return None
        if not axis_ok and any(a.name == "axis" for a in dq.attribute):
            return None
        return [*dq.input, ""][:3]

    def quantized(self, name: str) -> onnx.NodeProto | None:
        """The one QuantizeLinear reading `name`, when it is `name`'s only reader."""
        readers = self.readers.get(name, [])
        if len(readers) != 1 or name in self.ed.graph_outputs:
            return None
        q = readers[0]
        if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx") or q.input[0] != name:
            return None
        return q

    def direct(self, node: onnx.NodeProto) -> onnx.NodeProto | None:
        source = self.dequantized(node.input[0])
        outs = [self.quantized(o) for o in node.output]
        if source is None or not all(outs):
            return None
        # the outputs reuse the input's scale and zero point: then no requantization is lost
        if any(list(q.input[1:3]) != source[1:3] for q in outs if q is not None):
            return None
        self.absorbed.extend(q for q in outs if q is not None)
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.input[0] = source[0]
        for i, q in enumerate(outs):
            assert q is not None
            new.output[i] = q.output[0]
        return new

    def qlinear(self, node: onnx.NodeProto, form: QLinearForm) -> onnx.NodeProto | None:
        out = self.quantized(node.output[0]) if len(node.output) == 1 else None
        if out is None:
            return None
        indices: Sequence[int] = range(len(node.input)) if form.inputs is None else form.inputs
        triples = []
        for i in indices:
            axis_ok = node.op_type in _WEIGHTED and i == 1
            source = self.dequantized(node.input[i], axis_ok) if i < len(node.input) else None
            if source is None:
                return None
            triples.append(source)
        bias = ""
        if form.bias is not None and len(node.input) > form.bias and node.input[form.bias]:
            source = self.dequantized(node.input[form.bias], axis_ok=True)
            if source is None or self.ed.elem_types.get(source[0]) != onnx.TensorProto.INT32:
                return None
            bias = source[0]
        y = list(out.input[1:3])
        if node.op_type == "Concat":
            inputs = y + [v for t in triples for v in t]
        elif node.op_type == "Where":
            inputs = [node.input[0], *(v for t in triples for v in t), *y]
        else:
            inputs = [v for t in triples for v in t]
            if node.op_type == "Conv":
                inputs += y + ([bias] if bias else [])
            elif node.op_type == "Gemm":
                inputs += [bias, *y]
            else:
                inputs += y
        attrs = {
            a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in form.drop
        }
        attrs.update(form.extra)
        self.absorbed.append(out)
        if node.op_type == "Softmax":
            attrs["opset"] = self.opset
        return helper.make_node(
            form.op_type,
            inputs,
            [out.output[0]],
            f"{node.name}_quant" if node.name else "",
            domain=form.domain or None,
            **attrs,
        )

    def pad(self, node: onnx.NodeProto) -> onnx.NodeProto | None:
        """Pad on the 8-bit values (opset >= 11, where the padding value is an input): the
        padding value quantized with the input's scale and zero point (a constant offline, a
        computed one by a QuantizeLinear), or the zero point itself when there is none."""
        if self.opset < 11:
            return None
        new = self.direct(node)
        if new is None:
            return None
        _, scale, zero = self.dequantized(node.input[0]) or ["", "", ""]
        value = node.input[2] if len(node.input) > 2 else ""
        if not value:
            padding = zero
        elif (constant := self.ed.constant(value)) is not None:
            params = QuantParams(_value(self.ed, scale), _value(self.ed, zero))
            padding = self.ed.add_initializer(
                quantize_array(constant, params), f"{value}_quantized"
            )
        else:
            padding = self.ed.fresh(f"{value}_QuantizeLinear_Output")
            self.before.append(
                helper.make_node(
                    "QuantizeLinear",
                    [value, scale, zero],
                    [padding],
                    self.ed.fresh(f"{value}_QuantizeLinear"),
                )
            )
        del new.input[2:]
        new.input.append(padding)
        return new

    def rewrite(self, node: onnx.NodeProto) -> onnx.NodeProto | None:
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Pad":
            return self.pad(node)
        if node.op_type in _DIRECT:
            return self.direct(node)
        form = QLINEAR_FORMS.get(node.op_type)
        return None if form is None else self.qlinear(node, form)


def _value(editor: GraphEditor, name: str) -> np.ndarray:
    value = editor.constant(name)
    assert value is not None, f"{name!r} is written by the quantizer as an initializer"
    return value


def _prune(graph: onnx.GraphProto) -> None:
    """Remove the QuantizeLinear/DequantizeLinear nodes whose outputs nobody reads."""
    outputs = {o.name for o in graph.output}
    while True:
        read = {v for n in graph.node for v in n.input} | outputs
        dead = [
            n
            for n in graph.node
            if n.op_type in ("QuantizeLinear", "DequantizeLinear")
            and not any(o in read for o in n.output)
        ]
        if not dead:
            return
        for n in dead:
            graph.node.remove(n)


def to_qoperator(editor: GraphEditor) -> int:
    """Rewrite the QDQ graph of `editor` in QOperator format; returns the number of ops
    rewritten. Ops that do not fit (a float input, an unquantized output) stay as they were,
    between their Q/DQ nodes."""
    rewriter = _Rewriter(editor)
    graph = editor.graph
    nodes: list[onnx.NodeProto] = []
    done = 0
    for node in graph.node:
        new = rewriter.rewrite(node)
        nodes.extend(rewriter.before)
        rewriter.before.clear()
        nodes.append(node if new is None else new)
        done += new is not None
    gone = {id(q) for q in rewriter.absorbed}
    del graph.node[:]
    graph.node.extend(n for n in nodes if id(n) not in gone)
    _prune(graph)
    if any(n.domain == MS_DOMAIN for n in graph.node) and not any(
        o.domain == MS_DOMAIN for o in editor.model.opset_import
    ):
        editor.model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    editor.drop_unused_initializers([t.name for t in graph.initializer])
    return done
