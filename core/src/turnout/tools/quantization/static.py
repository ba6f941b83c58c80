"""Static quantization in QDQ format: activation ranges calibrated on turnout, then
QuantizeLinear/DequantizeLinear pairs around the quantized ops, as onnxruntime's quantize_static
writes them (a runtime fuses DQ -> op -> Q into an integer kernel; any runtime can run it as is).

Three steps: `_plan` walks the graph in order and decides, per op role (`ops.STATIC_ROLES`),
which tensors are activations (calibrated), weights (int8) and biases (int32); `collect_ranges`
calibrates the activations on the unchanged float model; `_write` inserts the Q/DQ nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, shape_inference

from turnout.graph import errors
from turnout.graph.errors import InvalidArgument
from turnout.tools.quantization.calibrate import collect_ranges
from turnout.tools.quantization.graph import GraphEditor, ModelInput, load_model, save_model
from turnout.tools.quantization.ops import QOPERATOR_ROLES, STATIC_ROLES, weight_axis
from turnout.tools.quantization.params import (
    QuantParams,
    params_for_range,
    quantize_array,
    quantize_bias,
    quantize_weight,
)
from turnout.tools.quantization.qoperator import to_qoperator
from turnout.tools.quantization.selection import check_extra_options, nothing_done, selected_nodes
from turnout.tools.quantization.types import CalibrationMethod, QuantFormat, QuantType, check_enum

__all__ = ["quantize_static"]

_log = logging.getLogger("turnout.tools.quantization")

_EXTRA_OPTIONS: dict[str, Any] = {
    "ActivationSymmetric": False,
    "WeightSymmetric": None,  # None: symmetric for int8 weights, asymmetric for uint8
    "CalibMovingAverage": False,
    "CalibMovingAverageConstant": 0.01,
    "CalibPercentile": 99.999,
    "CalibNumBins": None,
    "CalibNumQuantizedBins": 128,
    "ForceQuantizeNoInputCheck": False,
    "OpTypesToExcludeOutputQuantization": (),
    "MinimumRealRange": None,
    "MatMulConstBOnly": False,
    "QDQKeepRemovableActivations": False,
    "QDQOpTypePerChannelSupportToAxis": {},
    "QDQDisableWeightAdjustForInt32Bias": False,
    "ActivationRestrictedAsymmetric": False,
    "extra.Sigmoid.nnapi": False,
    "SmoothQuant": False,
    "CalibStridedMinMax": None,
    "CalibMaxIntermediateOutputs": None,
    "TensorQuantOverrides": {},
    "DefaultTensorType": None,
    "CalibTensorRangeSymmetric": False,
    "UseQDQContribOps": False,
    "QuantizeBias": True,
    "AddQDQPairToWeight": False,
    "DedicatedQDQPair": False,
}
# onnxruntime options accepted at the one value that is turnout's behaviour
_FIXED_OPTIONS = {"EnableSubgraph": False}


@dataclass
class _Settings:
    activation_type: QuantType
    weight_type: QuantType
    activation_symmetric: bool
    weight_symmetric: bool
    per_channel: bool
    reduce_range: bool
    force_passthrough: bool
    no_output_ops: frozenset[str]
    min_real_range: float | None = None
    matmul_const_b_only: bool = False
    keep_removable: bool = False
    quantize_bias: bool = True
    disable_weight_adjust: bool = False  # QDQDisableWeightAdjustForInt32Bias
    qdq_pair_to_weight: bool = False  # AddQDQPairToWeight: float weights -> Q -> DQ
    dedicated_qdq_pair: bool = False  # DedicatedQDQPair: a Q/DQ pair per quantized reader
    overrides: Mapping[str, Any] = field(default_factory=dict)  # TensorQuantOverrides
    channel_axes: Mapping[str, int] = field(default_factory=dict)
    # QOperator format: onnxruntime's QOperator writer stores a constant input of an
    # element-wise op (Add's bias) without reduce_range, its QDQ writer with it
    qoperator: bool = False


@dataclass
class _Plan:
    """What `_write` changes: activations (None: own range; else the tensor whose scale and
    zero point they reuse), weights (consumer, input index, per-channel axis) and biases
    (consumer, its input's name, the bias's name)."""

    activations: dict[str, str | None] = field(default_factory=dict)
    # Gather outputs (-> their Gather) that reuse the scale and zero point of its constant table
    table_outputs: dict[str, onnx.NodeProto] = field(default_factory=dict)
    weights: list[tuple[onnx.NodeProto, int, int | None]] = field(default_factory=list)
    biases: list[tuple[onnx.NodeProto, str, str]] = field(default_factory=list)
    as_activation: set[tuple[int, int]] = field(default_factory=set)  # (id(node), input)
    removed: int = 0

    def root(self, name: str) -> str:
        while (source := self.activations[name]) is not None:
            name = source
        return name


class _Planner:
    """Walks the chosen nodes in graph order (so a pass-through op sees whether its input is
    quantized yet) and fills the plan; only dropping Relu/Clip changes the graph here."""

    def __init__(
        self, editor: GraphEditor, settings: _Settings, roles: Mapping[str, str] = STATIC_ROLES
    ) -> None:
        self.ed = editor
        self.s = settings
        self.roles = roles  # op type -> role (ops.STATIC_ROLES or, for QOperator, QOPERATOR_ROLES)
        self.plan = _Plan()

    def _activation(self, name: str, source: str | None = None) -> None:
        if name and self.ed.is_float(name) and name not in self.plan.activations:
            self.plan.activations[name] = source

    def _input(self, node: onnx.NodeProto, index: int, axis: int | None = None) -> None:
        """Input `index` of `node`: a weight when it is a float initializer, else an activation."""
        name = node.input[index] if index < len(node.input) else ""
        if name in self.ed.initializers:
            if self.ed.is_float(name):
                self.plan.weights.append((node, index, axis))
        else:
            self._activation(name)

    def _outputs(self, node: onnx.NodeProto, source: str | None = None) -> None:
        if node.op_type not in self.s.no_output_ops:
            for name in node.output:
                self._activation(name, source)

    def remove_activations(self, chosen: list[onnx.NodeProto]) -> set[int]:
        """Drop each chosen Relu/Clip whose input comes only from a chosen node with a
        quantized output: the producer writes the activation's output name instead, and that
        tensor's calibrated range (>= 0 for Relu) clips. Returns the ids of the dropped nodes."""
        if self.s.activation_symmetric or self.s.keep_removable:
            return set()
        chosen_ids = {id(n) for n in chosen}
        dropped: set[int] = set()
        for node in chosen:
            if self.roles[node.op_type] != "removable":
                continue
            x = node.input[0]
            producer = self.ed.producer(x)
            if (
                producer is None
                or id(producer) not in chosen_ids
                or id(producer) in dropped
                or self.roles[producer.op_type] in ("removable", "passthrough")
                or producer.op_type in self.s.no_output_ops
                or len(self.ed.consumers(x)) != 1
                or x in self.ed.graph_outputs
            ):
                continue
            producer.output[list(producer.output).index(x)] = node.output[0]
            self.ed.graph.node.remove(node)
            dropped.add(id(node))
        self.plan.removed = len(dropped)
        return dropped

    def visit(self, node: onnx.NodeProto) -> None:
        role = self.roles[node.op_type]
        if role == "weighted":
            self._weighted(node)
        elif role == "passthrough":
            x = node.input[0]
            if node.op_type == "Gather" and x in self.ed.initializers:
                # an embedding table: quantized as an activation from its own min/max, and the
                # rows picked keep its scale and zero point (the same initializers), so that a
                # runtime gathers 8-bit rows instead of dequantizing the whole table
                if self.ed.is_float(x):
                    self.plan.table_outputs[node.output[0]] = node
                    self._activation(node.output[0])
                return
            if x not in self.plan.activations and self.s.force_passthrough:
                self._activation(x)
            if x in self.plan.activations:
                self._outputs(node, self.plan.root(x))
        elif role == "removable":  # kept: quantized when its input is, as onnxruntime's
            if node.input[0] in self.plan.activations:
                self._outputs(node)
        elif role == "pad":
            self._input(node, 0)
            if len(node.input) > 2 and node.input[2]:  # the padding value, in the activation type
                self._input(node, 2)
                if node.input[2] in self.ed.initializers:
                    self.plan.as_activation.add((id(node), 2))
            x = node.input[0]
            shared = x in self.plan.activations and _pad_keeps_range(node, self.ed)
            self._outputs(node, self.plan.root(x) if shared else None)
        elif role == "where":
            if self.s.force_passthrough:
                self._input(node, 1)
                self._input(node, 2)
                self._as_activations(node)
                self._outputs(node)
            elif self.roles is STATIC_ROLES and all(
                n in self.plan.activations for n in node.input[1:3]
            ):
                self._outputs(node)
        elif role == "normalization":
            self._input(node, 0)
            self._input(node, 1)
            self._outputs(node)
        else:  # generic
            for index, name in enumerate(node.input):
                if name:
                    self._input(node, index)
            self._as_activations(node)
            self._outputs(node)

    def _as_activations(self, node: onnx.NodeProto) -> None:
        """A constant input of an element-wise op is stored in the activation type, as
        onnxruntime stores it in both formats (QLinearAdd & co. take one element type)."""
        self.plan.as_activation.update(
            (id(node), i) for i, name in enumerate(node.input) if name in self.ed.initializers
        )

    def _weighted(self, node: onnx.NodeProto) -> None:
        x, w = node.input[0], node.input[1]
        if (
            self.s.matmul_const_b_only
            and node.op_type == "MatMul"
            and w not in self.ed.initializers
        ):
            return
        self._input(node, 0)
        axis = None
        if self.s.per_channel:
            axis = self.s.channel_axes.get(node.op_type, weight_axis(node))
        self._input(node, 1, axis)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        has_bias = node.op_type in _BIASED and len(node.input) > 2 and node.input[2]
        if (
            has_bias
            and self.s.quantize_bias
            and not self.s.weight_type.is_float8
            and x in self.plan.activations
            and w in self.ed.initializers
            and node.input[2] in self.ed.initializers
            and len(self.ed.initializers[node.input[2]].dims) == 1
            and attrs.get("alpha", 1.0) == 1.0
            and attrs.get("beta", 1.0) == 1.0
        ):
            self.plan.biases.append((node, x, node.input[2]))
        self._outputs(node)


_OVERRIDES = (frozenset(("scale", "zero_point")), frozenset(("rmin", "rmax")))


def _overridden(
    s: _Settings, params: Mapping[str, QuantParams], editor: GraphEditor
) -> dict[str, QuantParams]:
    """extra_options TensorQuantOverrides: an activation's scale and zero point, or the range
    they are computed from, given by the user (one encoding per tensor)."""
    out = {}
    for name, encodings in s.overrides.items():
        enc = dict(encodings[0]) if len(encodings) == 1 else {}
        if name not in params or set(enc) not in _OVERRIDES:
            raise errors.NotImplemented(
                f"TensorQuantOverrides[{name!r}]={encodings!r}: turnout.tools.quantization "
                "takes one encoding of {scale, zero_point} or {rmin, rmax}, for an activation "
                "with its own range"
            )
        if "scale" in enc:
            out[name] = QuantParams(
                np.asarray(enc["scale"], editor.scale_dtype(name)).reshape(()),
                np.asarray(enc["zero_point"]).astype(s.activation_type.dtype).reshape(()),
            )
        else:
            rmin, rmax = float(enc["rmin"]), float(enc["rmax"])
            out[name] = params_for_range(
                rmin,
                rmax,
                s.activation_type,
                s.activation_symmetric,
                scale_dtype=editor.scale_dtype(name),
            )
    return out


def _pad_keeps_range(node: onnx.NodeProto, editor: GraphEditor) -> bool:
    """Whether Pad's output holds only values of its input and zeros (onnxruntime's rule for
    letting it share the input's scale and zero point)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attrs.get("mode", b"constant")
    if mode in (b"reflect", b"edge", b"wrap"):
        return True
    if "pads" in attrs:  # opset < 11: the value is an attribute
        return float(attrs.get("value", 0.0)) == 0.0
    if len(node.input) < 3 or not node.input[2]:
        return True
    value = editor.constant(node.input[2])
    return value is not None and value.size == 1 and float(value.reshape(-1)[0]) == 0.0


_BIASED = ("Conv", "ConvTranspose", "Gemm")  # input 2 is a bias at x_scale * w_scale


def _bias_scale_too_small(bias: np.ndarray, scale: np.ndarray) -> bool:
    """Whether a float16 bias scale is 0 somewhere, or too small for the bias in int32."""
    scale64 = np.asarray(scale, np.float16).astype(np.float64)
    return bool(
        np.any(scale64 == 0)
        or np.any(np.abs(bias.astype(np.float64)) > np.iinfo(np.int32).max * scale64)
    )


class _Writer:
    """Inserts the planned Q/DQ nodes and quantized initializers into the graph."""

    def __init__(self, editor: GraphEditor, settings: _Settings) -> None:
        self.ed = editor
        self.s = settings
        self.front: list[onnx.NodeProto] = []
        self.after: dict[int, list[onnx.NodeProto]] = {}
        self.weights: dict[tuple[str, int | None], tuple[str, QuantParams]] = {}
        self.weight_params: dict[tuple[int, int], QuantParams] = {}  # (id(node), input index)
        self.replaced: set[str] = set()

    def scale_zero(self, params: QuantParams, hint: str) -> tuple[str, str]:
        return (
            self.ed.add_initializer(params.scale, f"{hint}_scale"),
            self.ed.add_initializer(params.zero_point, f"{hint}_zero_point"),
        )

    def _dequantize(
        self,
        q: np.ndarray,
        params: QuantParams,
        name: str,
        out: list[onnx.NodeProto],
        names: tuple[str, str] | None = None,
        keep_float: bool = False,
    ) -> str:
        """Initializer `name` stored as `q` behind a DequantizeLinear (`names`: scale and zero
        point initializers already made); with `keep_float` (AddQDQPairToWeight) the float
        initializer stays and a QuantizeLinear before the DequantizeLinear quantizes it."""
        scale, zero = names or self.scale_zero(params, name)
        axis: dict[str, Any] = {} if params.axis is None else {"axis": params.axis}
        if keep_float:
            q_name = self.ed.fresh(f"{name}_QuantizeLinear_Output")
            quantize = [name, scale, zero]
            out.append(
                helper.make_node(
                    "QuantizeLinear",
                    quantize,
                    [q_name],
                    self.ed.fresh(f"{name}_QuantizeLinear"),
                    **axis,
                )
            )
        else:
            q_name = self.ed.add_initializer(q, f"{name}_quantized")
            self.replaced.add(name)
        dq = self.ed.fresh(f"{name}_DequantizeLinear_Output")
        out.append(
            helper.make_node(
                "DequantizeLinear",
                [q_name, scale, zero],
                [dq],
                self.ed.fresh(f"{name}_DequantizeLinear"),
                **axis,
            )
        )
        return dq

    def weight(
        self,
        node: onnx.NodeProto,
        index: int,
        axis: int | None,
        as_activation: bool = False,
        scale: np.ndarray | None = None,
    ) -> None:
        """Input `index` of `node` read through one DequantizeLinear of the int8 weight, shared
        by every node that reads the same weight with the same axis (`as_activation`: in the
        activation type, asymmetric; `scale`: a scale raised for the bias, replacing the
        weight's own)."""
        name = node.input[index]
        if (name, axis) not in self.weights:
            value = self.ed.constant(name)
            assert value is not None
            q, params = _quantized_weight(value, self.s, axis, as_activation)
            if scale is not None:
                params = QuantParams(scale, params.zero_point, params.axis)
                q = quantize_array(value, params)
            dq = self._dequantize(q, params, name, self.front, keep_float=self.s.qdq_pair_to_weight)
            self.weights[name, axis] = (dq, params)
        node.input[index], self.weight_params[id(node), index] = self.weights[name, axis]

    def table(self, node: onnx.NodeProto) -> tuple[str, str, QuantParams]:
        """The constant table of Gather `node` in the activation type, behind a
        DequantizeLinear; returns its (scale, zero point) initializers, for the output to
        share, and their values."""
        name = node.input[0]
        value = self.ed.constant(name)
        assert value is not None
        s = self.s
        params = params_for_range(
            value.min(),
            value.max(),
            s.activation_type,
            s.activation_symmetric,
            scale_dtype=self.ed.scale_dtype(name),
        )
        scale, zero = self.scale_zero(params, name)
        node.input[0] = self._dequantize(
            quantize_array(value, params),
            params,
            name,
            self.front,
            (scale, zero),
            self.s.qdq_pair_to_weight,
        )
        return scale, zero, params

    def bias(self, node: onnx.NodeProto, x_scale: np.ndarray, b: str) -> None:
        value = self.ed.constant(b)
        assert value is not None
        w_scale = self.weight_params[id(node), 1].scale
        scale = x_scale * w_scale
        if value.dtype == np.float16 and _bias_scale_too_small(value, scale):
            # a float16 scale that rounds to 0 or clips the bias to int32: the bias is
            # dequantized at a float32 scale (at least |bias| / int32 max) and cast back to
            # float16, as onnxruntime does
            scale = x_scale.astype(np.float32) * w_scale.astype(np.float32)
            least = np.abs(value.astype(np.float64)) / np.iinfo(np.int32).max
            least = least.max() if scale.size == 1 else least
            scale = np.maximum(scale, least * 1.0001).astype(np.float32)
            scale = np.where(scale == 0, np.float32(1), scale).astype(np.float32)
            q, params = quantize_bias(value, scale)
            dq = self._dequantize(q, params, b, self.front)
            node.input[2] = self.ed.fresh(f"{b}_Cast_Output")
            self.front.append(
                helper.make_node(
                    "Cast",
                    [dq],
                    [node.input[2]],
                    self.ed.fresh(f"{b}_Cast"),
                    to=TensorProto.FLOAT16,
                )
            )
            return
        q, params = quantize_bias(value, scale)
        node.input[2] = self._dequantize(q, params, b, self.front)

    def activation(
        self,
        name: str,
        scale: str,
        zero: str,
        producer: onnx.NodeProto | None,
        receivers: Sequence[onnx.NodeProto] = (),
    ) -> None:
        """A QuantizeLinear/DequantizeLinear pair after `name`, read by all its readers; with
        DedicatedQDQPair and several quantized `receivers`, one pair for each of them
        (`_1`, `_2`, ...), and the other readers (and a graph output) keep the float value."""
        if self.s.dedicated_qdq_pair and len(receivers) > 1:
            pairs: list[onnx.NodeProto] = []
            for i, receiver in enumerate(receivers, 1):
                q_out = self.ed.fresh(f"{name}_QuantizeLinear_Output_{i}")
                dq_out = self.ed.fresh(f"{name}_DequantizeLinear_Output_{i}")
                pairs += self._pair(name, q_out, dq_out, scale, zero, f"_{i}")
                receiver.input[:] = [dq_out if x == name else x for x in receiver.input]
            self._place(pairs, producer)
            return
        q_in = name
        if name in self.ed.graph_outputs and producer is not None:
            q_in = self.ed.fresh(f"{name}_QuantizeLinear_Input")
            producer.output[list(producer.output).index(name)] = q_in
            dq_out = name
        else:
            dq_out = self.ed.fresh(f"{name}_DequantizeLinear_Output")
            self.ed.rewire(name, dq_out)
        q_out = self.ed.fresh(f"{name}_QuantizeLinear_Output")
        self._place(self._pair(q_in, q_out, dq_out, scale, zero, "", name), producer)

    def _pair(
        self, q_in: str, q_out: str, dq_out: str, scale: str, zero: str, suffix: str, hint: str = ""
    ) -> list[onnx.NodeProto]:
        hint = hint or q_in
        return [
            helper.make_node(
                "QuantizeLinear",
                [q_in, scale, zero],
                [q_out],
                self.ed.fresh(f"{hint}_QuantizeLinear{suffix}"),
            ),
            helper.make_node(
                "DequantizeLinear",
                [q_out, scale, zero],
                [dq_out],
                self.ed.fresh(f"{hint}_DequantizeLinear{suffix}"),
            ),
        ]

    def _place(self, nodes: list[onnx.NodeProto], producer: onnx.NodeProto | None) -> None:
        """`nodes` at the front of the graph, or right after `producer`."""
        if producer is None:
            self.front.extend(nodes)
        else:
            self.after.setdefault(id(producer), []).extend(nodes)

    def finish(self) -> None:
        nodes = list(self.front)
        for node in self.ed.graph.node:
            nodes.append(node)
            nodes.extend(self.after.get(id(node), ()))
        del self.ed.graph.node[:]
        self.ed.graph.node.extend(nodes)
        self.ed.drop_unused_initializers(self.replaced)


def _quantized_weight(
    value: np.ndarray, s: _Settings, axis: int | None, as_activation: bool
) -> tuple[np.ndarray, QuantParams]:
    if as_activation:  # QDQ applies reduce_range to these too; QOperator does not
        reduce_range = s.reduce_range and not s.qoperator
        return quantize_weight(
            value, s.activation_type, s.activation_symmetric, reduce_range=reduce_range
        )
    return quantize_weight(value, s.weight_type, s.weight_symmetric, axis, s.reduce_range)


def _weight_scales_for_biases(
    editor: GraphEditor, plan: _Plan, params: Mapping[str, QuantParams], s: _Settings
) -> dict[tuple[str, int | None], np.ndarray]:
    """Weight scales raised so that each bias fits int32 at x_scale * w_scale (onnxruntime's
    adjustment for symmetric int8/int16 weights, off with QDQDisableWeightAdjustForInt32Bias):
    where a bias (or, per channel, a channel's bias) needs a larger scale than the product, the
    weight's scale grows by the ratio (float16 scales rounded up). Keyed by (weight, axis)."""
    if s.disable_weight_adjust or s.weight_type not in (QuantType.QInt8, QuantType.QInt16):
        return {}
    axes = {(id(node), index): axis for node, index, axis in plan.weights}
    scales: dict[tuple[str, int | None], np.ndarray] = {}
    limit = np.float64(np.iinfo(np.int32).max) - np.float64(np.iinfo(np.int32).min + 1)
    for node, x, b in plan.biases:
        weight, axis = node.input[1], axes.get((id(node), 1))
        value, bias = editor.constant(weight), editor.constant(b)
        if value is None or bias is None or (id(node), 1) not in axes:
            continue
        w_params = _quantized_weight(value, s, axis, False)[1]
        if w_params.zero_point.any():
            continue
        w_scale = scales.get((weight, axis), w_params.scale)
        x_scale = np.float64(params[plan.root(x)].scale)
        bias64 = bias.astype(np.float64)
        if axis is None:
            needed = 1.0001 * (2.0 * np.abs(bias64).max(initial=0.0)) / limit
        else:  # onnxruntime's rounding: per channel, 1.0001 * 2|b| is in the bias's type
            needed = (bias.dtype.type(1.0001) * (2 * np.abs(bias))).astype(np.float64) / limit
        candidate = x_scale * w_scale.astype(np.float64)
        raise_it = (candidate < needed) & (candidate > 0)
        if not raise_it.any():
            continue
        wanted = w_scale.astype(np.float64) * np.where(raise_it, needed / candidate, 1.0)
        rounded = wanted.astype(w_scale.dtype)
        if w_scale.dtype == np.float16:  # rounding must not undo the raise
            low = rounded < wanted
            rounded = np.where(low, np.nextafter(rounded, np.float16(np.inf)), rounded)
        scales[weight, axis] = np.where(raise_it, rounded, w_scale).astype(w_scale.dtype)
    return scales


def _write(
    editor: GraphEditor,
    plan: _Plan,
    ranges: Mapping[str, tuple[float, float]],
    s: _Settings,
    quantized: Sequence[onnx.NodeProto] = (),
) -> None:
    """Write `plan` into the graph; `quantized`: the nodes chosen for quantization (the
    receivers that DedicatedQDQPair gives a pair each)."""
    writer = _Writer(editor, s)
    params = {
        name: params_for_range(
            *ranges[name],
            s.activation_type,
            s.activation_symmetric,
            False,
            s.min_real_range,
            editor.scale_dtype(name),
        )
        for name, source in plan.activations.items()
        if source is None and name not in plan.table_outputs
    }
    params.update(_overridden(s, params, editor))
    tables = {name: writer.table(gather) for name, gather in plan.table_outputs.items()}
    params.update({name: table[2] for name, table in tables.items()})
    raised = _weight_scales_for_biases(editor, plan, params, s)
    for node, index, axis in plan.weights:
        as_activation = (id(node), index) in plan.as_activation
        scale = None if as_activation else raised.get((node.input[index], axis))
        writer.weight(node, index, axis, as_activation, scale)
    for node, x, b in plan.biases:
        writer.bias(node, params[plan.root(x)].scale, b)
    producers = {out: n for n in editor.graph.node for out in n.output}
    shared = {name: (table[0], table[1]) for name, table in tables.items()}
    for name in plan.activations:
        root = plan.root(name)
        if root not in shared:
            shared[root] = writer.scale_zero(params[root], root)
        receivers = [n for n in quantized if name in n.input] if s.dedicated_qdq_pair else []
        writer.activation(name, *shared[root], producers.get(name), receivers)
    writer.finish()


def quantize_static(
    model_input: ModelInput,
    model_output: ModelInput | None,
    calibration_data_reader: Any,
    *,
    quant_format: QuantFormat = QuantFormat.QDQ,
    op_types_to_quantize: Iterable[str] | None = None,
    per_channel: bool = False,
    reduce_range: bool = False,
    activation_type: QuantType = QuantType.QUInt8,
    weight_type: QuantType = QuantType.QInt8,
    nodes_to_quantize: Iterable[str] | None = None,
    nodes_to_exclude: Iterable[str] | None = None,
    use_external_data_format: bool = False,
    calibrate_method: CalibrationMethod = CalibrationMethod.MinMax,
    calibration_providers: Sequence[Any] | None = None,
    extra_options: Mapping[str, Any] | None = None,
) -> onnx.ModelProto:
    """Calibrate activation ranges on turnout over `calibration_data_reader` and write a QDQ
    model: int8 weights (per channel when asked) and int32 biases behind DequantizeLinear,
    a QuantizeLinear/DequantizeLinear pair on each quantized activation.

    `calibration_data_reader` is a CalibrationDataReader (anything with `get_next()`) or an
    iterable of feed dicts; the calibration runs on turnout with `calibration_providers`
    (default: the CPU). `model_input`/`model_output` are paths or ModelProtos; the
    quantized model is returned. Raises InvalidArgument naming the input when a calibration
    feed does not fit the model; where nothing can be quantized the model is written
    unchanged (the reasons are logged).
    `quant_format=QuantFormat.QOperator` writes QLinear* operators instead of Q/DQ pairs.
    """
    fmt = check_enum(quant_format, QuantFormat, "quant_format")
    method = check_enum(calibrate_method, CalibrationMethod, "calibrate_method")
    assert isinstance(method, CalibrationMethod)
    options = check_extra_options(extra_options, _EXTRA_OPTIONS, _FIXED_OPTIONS)
    settings = _settings(options, activation_type, weight_type, per_channel, reduce_range)
    settings.qoperator = fmt is QuantFormat.QOperator
    if fmt is QuantFormat.QOperator:  # QDQ options, which onnxruntime's QOperator writer ignores
        settings.qdq_pair_to_weight = settings.dedicated_qdq_pair = False
    if (
        settings.activation_type is QuantType.QInt8 and settings.weight_type is QuantType.QUInt8
    ):  # onnxruntime's check, word for word
        raise InvalidArgument(
            "ONNXRuntime quantization doesn't support data format:"
            "activation_type=QuantType.QInt8, weight_type=QuantType.QUInt8"
        )
    if (settings.activation_type.is_float8 or settings.weight_type.is_float8) and not (
        settings.activation_type.is_float8 and settings.weight_type.is_float8
    ):
        raise InvalidArgument(
            "QFLOAT8E4M3FN quantizes weights and activations both (as onnxruntime's): "
            f"activation_type={settings.activation_type}, weight_type={settings.weight_type}"
        )
    if settings.activation_type.is_float8 and method is not CalibrationMethod.Distribution:
        raise InvalidArgument(
            "float8 quantization takes scales from the values' spread: pass "
            "calibrate_method=CalibrationMethod.Distribution (as onnxruntime requires)"
        )
    original = _at_opset(load_model(model_input), settings)
    if fmt is QuantFormat.QOperator and _has_float16(original):
        # onnxruntime writes one, with float16 scales on QLinearConv & co., and cannot load it
        raise errors.NotImplemented(
            "quant_format=QOperator of a float16 model: the QLinear* ops take float32 scales "
            "only; use QuantFormat.QDQ (float16 scales on QuantizeLinear/DequantizeLinear-19)"
        )
    model = load_model(original)
    editor = GraphEditor(model, _FLOATS)
    editor.check_opset(13 if per_channel else 10, "per-channel QDQ" if per_channel else "QDQ")
    roles = STATIC_ROLES if fmt is QuantFormat.QDQ else QOPERATOR_ROLES
    chosen = selected_nodes(
        model.graph, op_types_to_quantize, roles, roles, nodes_to_quantize, nodes_to_exclude
    )
    planner = _Planner(editor, settings, roles)
    dropped = planner.remove_activations(chosen)
    for node in chosen:
        if id(node) not in dropped:
            planner.visit(node)
    plan = planner.plan
    if not plan.activations and not plan.weights:
        reasons = [f"{n.op_type} {n.name or n.output[0]!r}: nothing float" for n in chosen]
        _log.warning("%s; the model is written unchanged", nothing_done(reasons, model.graph))
        save_model(original, model_output, use_external_data_format)
        return original
    own = [
        name
        for name, source in plan.activations.items()
        if source is None and name not in plan.table_outputs
    ]
    providers = list(calibration_providers or ["CPUExecutionProvider"])
    ranges = collect_ranges(original, own, calibration_data_reader, method, options, providers)
    _write(editor, plan, ranges, settings, [n for n in chosen if id(n) not in dropped])
    if fmt is QuantFormat.QOperator:
        to_qoperator(editor)
    if options["UseQDQContribOps"]:
        _to_contrib_domain(editor)
    onnx.checker.check_model(model)
    save_model(model, model_output, use_external_data_format)
    return model


_QDQ = ("QuantizeLinear", "DequantizeLinear")
# the element types static quantization quantizes (a float16 model gets float16 scales)
_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16)


def _has_float16(model: onnx.ModelProto) -> bool:
    g = model.graph
    values = [*g.input, *g.output, *g.value_info]
    return any(t.data_type == TensorProto.FLOAT16 for t in g.initializer) or any(
        v.type.tensor_type.elem_type == TensorProto.FLOAT16 for v in values
    )


def _to_contrib_domain(editor: GraphEditor) -> None:
    """extra_options UseQDQContribOps: the QuantizeLinear/DequantizeLinear nodes written in the
    com.microsoft domain (onnxruntime's contrib kernels, which turnout's CPU provider has too)."""
    ms = "com.microsoft"
    for node in editor.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.domain in (
            "",
            "ai.onnx",
        ):
            node.domain = ms
    if not any(o.domain == ms for o in editor.model.opset_import):
        editor.model.opset_import.append(helper.make_opsetid(ms, 1))


def _settings(
    options: Mapping[str, Any],
    activation_type: Any,
    weight_type: Any,
    per_channel: bool,
    reduce_range: bool,
) -> _Settings:
    wtype = QuantType.of(weight_type, "weight_type")
    w_symmetric = options["WeightSymmetric"]
    signed = (QuantType.QInt8, QuantType.QInt16, QuantType.QFLOAT8E4M3FN)
    return _Settings(
        activation_type=QuantType.of(activation_type, "activation_type"),
        weight_type=wtype,
        activation_symmetric=bool(options["ActivationSymmetric"]),
        weight_symmetric=wtype in signed if w_symmetric is None else bool(w_symmetric),
        per_channel=per_channel,
        reduce_range=reduce_range,
        force_passthrough=bool(options["ForceQuantizeNoInputCheck"]),
        no_output_ops=frozenset(options["OpTypesToExcludeOutputQuantization"]),
        min_real_range=options["MinimumRealRange"],
        matmul_const_b_only=bool(options["MatMulConstBOnly"]),
        keep_removable=bool(options["QDQKeepRemovableActivations"]),
        quantize_bias=bool(options["QuantizeBias"]),
        disable_weight_adjust=bool(options["QDQDisableWeightAdjustForInt32Bias"]),
        qdq_pair_to_weight=bool(options["AddQDQPairToWeight"]),
        dedicated_qdq_pair=bool(options["DedicatedQDQPair"]),
        overrides=dict(options["TensorQuantOverrides"] or {}),
        channel_axes=dict(options["QDQOpTypePerChannelSupportToAxis"] or {}),
    )


def _at_opset(model: onnx.ModelProto, s: _Settings) -> onnx.ModelProto:
    """`model` converted to the opset its Q/DQ types need, as onnxruntime does (with a
    warning): 21 for 16-bit integers, 19 for float8 and for a float16 model (float16 scales
    need QuantizeLinear-19; onnxruntime writes them at the model's opset, and the model it
    writes then fails to load)."""
    types: tuple[Any, ...] = (s.activation_type, s.weight_type)
    need = 0
    if any(t in (QuantType.QInt16, QuantType.QUInt16) for t in types):
        need = 21
    elif any(t.is_float8 for t in types):
        need = 19
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if need < 19 and opset < 19 and _has_float16(model):
        need, types = 19, ("float16 scales",)
    if opset >= need:
        return model
    _log.warning("%s needs opset %d; the model (opset %d) is converted", types, need, opset)
    from onnx import version_converter

    return shape_inference.infer_shapes(version_converter.convert_version(model, need))
