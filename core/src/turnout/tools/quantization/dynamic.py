"""Dynamic quantization: int8 weights stored in the model, activations quantized at run time.

Each quantized Conv / MatMul / Gemm becomes the standard-op pattern onnxruntime's
quantize_dynamic writes, so either runtime runs the result:

    x -> DynamicQuantizeLinear -> (x_q, x_scale, x_zp)
    ConvInteger | MatMulInteger (x_q, w_q, x_zp, w_zp) -> int32 -> Cast(float)
    -> Mul(x_scale * w_scale) [-> Add(bias)] -> y

One DynamicQuantizeLinear serves every quantized consumer of the same activation. Gemm is
written as MatMulInteger over the (offline transposed) weight, with alpha folded into the weight
scale and beta into the bias. A Gather from a constant table (an embedding) gathers int8 rows
and dequantizes them (DequantizeLinear), as onnxruntime does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from turnout.graph import errors
from turnout.tools.quantization.graph import GraphEditor, ModelInput, load_model, save_model
from turnout.tools.quantization.params import quantize_weight
from turnout.tools.quantization.selection import check_extra_options, nothing_done, selected_nodes
from turnout.tools.quantization.types import QuantType

__all__ = ["quantize_dynamic"]

_log = logging.getLogger("turnout.tools.quantization")

DYNAMIC_OPS = ("Conv", "MatMul", "Gemm", "Gather")
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_EXTRA_OPTIONS: dict[str, Any] = {"WeightSymmetric": None, "MatMulConstBOnly": True}
# onnxruntime options accepted at the one value that is turnout's behaviour
_FIXED_OPTIONS = {"EnableSubgraph": False}


@dataclass
class _Settings:
    weight_type: QuantType
    symmetric: bool
    per_channel: bool
    reduce_range: bool
    const_b_only: bool = True  # extra_options MatMulConstBOnly


class _DynamicQuantizer:
    """Rewrites one chosen node at a time into `out`; each handler returns why it left the
    node float (None when it quantized it), and changes nothing in that case."""

    def __init__(self, editor: GraphEditor, settings: _Settings) -> None:
        self.ed = editor
        self.s = settings
        self.quantized_inputs: dict[str, tuple[str, str, str]] = {}
        self.replaced: set[str] = set()  # float initializers now stored quantized
        self.weights: dict[tuple[str, int, bool, bool], tuple[str, str, np.ndarray]] = {}

    def activation(self, name: str, out: list[onnx.NodeProto]) -> tuple[str, str, str]:
        """(x_q, x_scale, x_zp) of activation `name`, adding its DynamicQuantizeLinear once."""
        if name not in self.quantized_inputs:
            names = (
                self.ed.fresh(f"{name}_quantized"),
                self.ed.fresh(f"{name}_scale"),
                self.ed.fresh(f"{name}_zero_point"),
            )
            node_name = self.ed.fresh(f"{name}_DynamicQuantizeLinear")
            out.append(helper.make_node("DynamicQuantizeLinear", [name], list(names), node_name))
            self.quantized_inputs[name] = names
        return self.quantized_inputs[name]

    def weight(
        self,
        name: str,
        value: np.ndarray,
        axis: int,
        scale_shape: tuple[int, ...] | None,
        one_zero_point: bool = False,
        transposed: bool = False,
    ) -> tuple[str, str, np.ndarray]:
        """(w_q, w_zp) initializers and the float scale of `value` (initializer `name`, or its
        transpose); per channel along `axis` when asked, the scale reshaped to `scale_shape`
        so it broadcasts over the output. `one_zero_point` makes per-channel weights symmetric,
        so that a single zero point serves every channel (onnxruntime's ConvInteger takes no
        per-channel zero point). Nodes that share a weight share its quantized initializers."""
        key = (name, axis, one_zero_point, transposed)
        if key not in self.weights:
            per_channel = self.s.per_channel
            q, params = quantize_weight(
                value,
                self.s.weight_type,
                self.s.symmetric or (per_channel and one_zero_point),
                axis if per_channel else None,
                self.s.reduce_range,
            )
            zero = params.zero_point
            if (zero == zero.reshape(-1)[0]).all():  # one zero point serves every channel
                zero = zero.reshape(-1)[0].reshape(())
            q_name = self.ed.add_initializer(q, f"{name}_quantized")
            zp_name = self.ed.add_initializer(zero, f"{name}_zero_point")
            self.weights[key] = (q_name, zp_name, params.scale)
            self.replaced.add(name)
        q_name, zp_name, scale = self.weights[key]
        if self.s.per_channel and scale_shape is not None:
            scale = scale.reshape(scale_shape)
        return q_name, zp_name, scale

    def rescale(
        self,
        node: onnx.NodeProto,
        int_node: onnx.NodeProto,
        x_scale: str,
        w_scale: np.ndarray | str,
        bias: str | None,
        out: list[onnx.NodeProto],
    ) -> None:
        """int32 result -> float: Cast, times x_scale * w_scale (a constant, or the name of a
        computed B's scale), plus the bias."""
        base = node.name or node.output[0]
        scale_name = (
            w_scale
            if isinstance(w_scale, str)
            else self.ed.add_initializer(w_scale.astype(np.float32), f"{base}_weight_scale")
        )
        scales = self.ed.fresh(f"{base}_scales")
        out.append(
            helper.make_node(
                "Mul", [x_scale, scale_name], [scales], self.ed.fresh(f"{base}_scales_mul")
            )
        )
        out.append(int_node)
        cast = self.ed.fresh(f"{base}_int32_cast")
        out.append(
            helper.make_node(
                "Cast",
                [int_node.output[0]],
                [cast],
                self.ed.fresh(f"{base}_cast"),
                to=TensorProto.FLOAT,
            )
        )
        y = node.output[0]
        scaled = y if bias is None else self.ed.fresh(f"{base}_scaled")
        out.append(
            helper.make_node("Mul", [cast, scales], [scaled], self.ed.fresh(f"{base}_rescale"))
        )
        if bias is not None:
            out.append(
                helper.make_node("Add", [scaled, bias], [y], self.ed.fresh(f"{base}_bias_add"))
            )

    def conv(self, node: onnx.NodeProto, out: list[onnx.NodeProto]) -> str | None:
        w = self.ed.constant(node.input[1])
        if w is None:
            return "its weight W is not an initializer"
        bias = None
        if len(node.input) > 2 and node.input[2]:
            b = self.ed.constant(node.input[2])
            if b is None:
                return "its bias B is not an initializer"
            # a Reshape node to [1, M, 1, ...], as onnxruntime writes it (same node counts)
            shape = np.array([1, -1, *[1] * (w.ndim - 2)], np.int64)
            base = node.output[0]
            bias = self.ed.fresh(f"{base}_bias_reshape_output")
            out.append(
                helper.make_node(
                    "Reshape",
                    [node.input[2], self.ed.add_initializer(shape, f"{base}_bias_reshape_shape")],
                    [bias],
                    self.ed.fresh(f"{base}_bias_reshape"),
                )
            )
        channels = (w.shape[0], *[1] * (w.ndim - 2))
        x_q, x_scale, x_zp = self.activation(node.input[0], out)
        w_q, w_zp, w_scale = self.weight(node.input[1], w, 0, channels, one_zero_point=True)
        base = node.name or node.output[0]
        attrs = [a for a in node.attribute if a.name in _CONV_ATTRS]
        int_node = helper.make_node(
            "ConvInteger",
            [x_q, w_q, x_zp, w_zp],
            [self.ed.fresh(f"{base}_int32")],
            self.ed.fresh(f"{base}_quant"),
        )
        int_node.attribute.extend(attrs)
        self.rescale(node, int_node, x_scale, w_scale, bias, out)
        return None

    def gather(self, node: onnx.NodeProto, out: list[onnx.NodeProto]) -> str | None:
        """An embedding table stored as int8: Gather picks int8 rows, DequantizeLinear
        turns only those back to float."""
        table = self.ed.constant(node.input[0])
        if table is None:
            return "its data is not an initializer"
        q, params = quantize_weight(
            table, self.s.weight_type, self.s.symmetric, None, self.s.reduce_range
        )
        self.replaced.add(node.input[0])
        base = node.name or node.output[0]
        picked = self.ed.fresh(f"{base}_quantized_output")
        gathered = helper.make_node(
            "Gather",
            [self.ed.add_initializer(q, f"{node.input[0]}_quantized"), node.input[1]],
            [picked],
            self.ed.fresh(f"{base}_quant"),
        )
        gathered.attribute.extend(node.attribute)
        scale = self.ed.add_initializer(params.scale, f"{node.input[0]}_scale")
        zero = self.ed.add_initializer(params.zero_point, f"{node.input[0]}_zero_point")
        dq = helper.make_node(
            "DequantizeLinear", [picked, scale, zero], [node.output[0]], self.ed.fresh(f"{base}_dq")
        )
        out.extend([gathered, dq])
        return None

    def matmul(self, node: onnx.NodeProto, out: list[onnx.NodeProto]) -> str | None:
        w = self.ed.constant(node.input[1])
        if w is None and not self.s.const_b_only and self.ed.is_float(node.input[1]):
            self._matmul_computed_b(node, out)
            return None
        if w is None:
            return "its input B is not an initializer (only constant weights are quantized)"
        if w.ndim < 2:
            return "its input B is 1-D"
        self._matmul_integer(node, w, 1.0, None, out)
        return None

    def gemm(self, node: onnx.NodeProto, out: list[onnx.NodeProto]) -> str | None:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("transA", 0):
            return "transA=1"
        w = self.ed.constant(node.input[1])
        if w is None:
            return "its input B is not an initializer"
        if attrs.get("transB", 0):
            w = w.T
        beta = float(attrs.get("beta", 1.0))
        bias = None
        if len(node.input) > 2 and node.input[2]:
            c = self.ed.constant(node.input[2])
            if c is not None:
                bias = self.ed.add_initializer(
                    (beta * c).astype(np.float32), f"{node.input[2]}_scaled"
                )
                self.replaced.add(node.input[2])
            elif beta == 1.0:
                bias = node.input[2]
            else:
                return f"its input C is computed and beta={beta}"
        alpha = float(attrs.get("alpha", 1.0))
        transposed = bool(attrs.get("transB", 0))
        self._matmul_integer(node, np.ascontiguousarray(w), alpha, bias, out, transposed)
        return None

    def _matmul_computed_b(self, node: onnx.NodeProto, out: list[onnx.NodeProto]) -> None:
        """MatMulConstBOnly=False: both inputs quantized at run time, as onnxruntime writes
        it (a DynamicQuantizeLinear each, MatMulInteger, the product of their scales)."""
        x_q, x_scale, x_zp = self.activation(node.input[0], out)
        b_q, b_scale, b_zp = self.activation(node.input[1], out)
        int_node = self._int_matmul(node, [x_q, b_q, x_zp, b_zp])
        self.rescale(node, int_node, x_scale, b_scale, None, out)

    def _int_matmul(self, node: onnx.NodeProto, inputs: list[str]) -> onnx.NodeProto:
        """The MatMulInteger node standing for `node`, on (a_q, b_q, a_zp, b_zp)."""
        base = node.name or node.output[0]
        return helper.make_node(
            "MatMulInteger",
            inputs,
            [self.ed.fresh(f"{base}_int32")],
            self.ed.fresh(f"{base}_quant"),
        )

    def _matmul_integer(
        self,
        node: onnx.NodeProto,
        w: np.ndarray,
        alpha: float,
        bias: str | None,
        out: list[onnx.NodeProto],
        transposed: bool = False,
    ) -> None:
        x_q, x_scale, x_zp = self.activation(node.input[0], out)
        w_q, w_zp, w_scale = self.weight(
            node.input[1], w, -1, (w.shape[-1],), transposed=transposed
        )
        int_node = self._int_matmul(node, [x_q, w_q, x_zp, w_zp])
        self.rescale(node, int_node, x_scale, w_scale * np.float32(alpha), bias, out)
        return None


def quantize_dynamic(
    model_input: ModelInput,
    model_output: ModelInput | None,
    *,
    op_types_to_quantize: Iterable[str] | None = None,
    per_channel: bool = False,
    reduce_range: bool = False,
    weight_type: QuantType = QuantType.QInt8,
    nodes_to_quantize: Iterable[str] | None = None,
    nodes_to_exclude: Iterable[str] | None = None,
    use_external_data_format: bool = False,
    extra_options: Mapping[str, Any] | None = None,
) -> onnx.ModelProto:
    """Quantize the weights of Conv, MatMul and Gemm to 8 bits and their inputs at run time;
    constant Gather tables (embeddings) are stored as 8 bits too.

    `model_input` and `model_output` are paths or ModelProtos (the output ModelProto is filled
    in place; None writes nothing); the quantized model is returned. `weight_type` QInt8
    weights are symmetric, QUInt8 asymmetric (extra_options `WeightSymmetric` overrides);
    `per_channel` gives each output channel its own scale. Where no node can be quantized the
    model is written unchanged, as onnxruntime does, and the reason for each candidate is
    logged.
    """
    wtype = QuantType.of(weight_type, "weight_type")
    if wtype not in (QuantType.QInt8, QuantType.QUInt8):
        raise errors.NotImplemented(
            f"weight_type={wtype}: dynamic quantization writes 8-bit weights (QInt8, QUInt8), "
            "as DynamicQuantizeLinear and MatMulInteger take"
        )
    options = check_extra_options(extra_options, _EXTRA_OPTIONS, _FIXED_OPTIONS)
    symmetric = options["WeightSymmetric"]
    settings = _Settings(
        wtype,
        wtype is QuantType.QInt8 if symmetric is None else bool(symmetric),
        per_channel,
        reduce_range,
        bool(options["MatMulConstBOnly"]),
    )
    model = load_model(model_input)
    editor = GraphEditor(model)
    editor.check_opset(11, "DynamicQuantizeLinear")
    chosen = selected_nodes(
        model.graph,
        op_types_to_quantize,
        DYNAMIC_OPS,
        DYNAMIC_OPS,
        nodes_to_quantize,
        nodes_to_exclude,
    )
    quantizer = _DynamicQuantizer(editor, settings)
    handlers = {
        "Conv": quantizer.conv,
        "MatMul": quantizer.matmul,
        "Gemm": quantizer.gemm,
        "Gather": quantizer.gather,
    }
    chosen_ids = {id(n) for n in chosen}
    nodes: list[onnx.NodeProto] = []
    reasons: list[str] = []
    done = 0
    for node in model.graph.node:
        if id(node) not in chosen_ids:
            nodes.append(node)
            continue
        why = "its input is not float" if not editor.is_float(node.input[0]) else None
        if why is None:
            why = handlers[node.op_type](node, nodes)
        if why is None:
            done += 1
        else:
            reasons.append(f"{node.op_type} {node.name or node.output[0]!r}: {why}")
            nodes.append(node)
    if done == 0:  # onnxruntime writes the model unchanged; the reasons go to the log
        _log.warning("%s; the model is written unchanged", nothing_done(reasons, model.graph))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    editor.drop_unused_initializers(quantizer.replaced)
    onnx.checker.check_model(model)
    save_model(model, model_output, use_external_data_format)
    return model
