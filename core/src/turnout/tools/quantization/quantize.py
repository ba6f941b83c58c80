"""onnxruntime.quantization's configuration objects and `quantize(model, output, config)`, on
turnout's quantizers: `StaticQuantConfig` runs `quantize_static`, `DynamicQuantConfig`
`quantize_dynamic`, and `get_qdq_config` fills a StaticQuantConfig the way onnxruntime's does
(its keyword arguments become extra_options)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from typing import Any

import onnx

from turnout.tools.quantization.dynamic import quantize_dynamic
from turnout.tools.quantization.graph import ModelInput, load_model
from turnout.tools.quantization.static import quantize_static
from turnout.tools.quantization.types import CalibrationMethod, QuantFormat, QuantType

__all__ = [
    "DynamicQuantConfig",
    "QuantConfig",
    "QuantizationMode",
    "StaticQuantConfig",
    "get_qdq_config",
    "quantize",
    "quantize_dynamic",
    "quantize_static",
]


class QuantizationMode(Enum):
    """onnxruntime's names for the two ways of writing a quantized op: integer ops
    (ConvInteger, MatMulInteger: dynamic) and QLinear ops."""

    IntegerOps = 0
    QLinearOps = 1

    def __str__(self) -> str:
        return self.name


class QuantConfig:
    """What both kinds of quantization take (onnxruntime's base class of the configs)."""

    def __init__(
        self,
        activation_type: Any = QuantType.QUInt8,
        weight_type: Any = QuantType.QInt8,
        op_types_to_quantize: Iterable[str] | None = None,
        nodes_to_quantize: Iterable[str] | None = None,
        nodes_to_exclude: Iterable[str] | None = None,
        per_channel: bool = False,
        reduce_range: bool = False,
        use_external_data_format: bool = False,
    ) -> None:
        self.activation_type = activation_type
        self.weight_type = weight_type
        self.op_types_to_quantize = list(op_types_to_quantize or [])
        self.nodes_to_quantize = list(nodes_to_quantize or [])
        self.nodes_to_exclude = list(nodes_to_exclude or [])
        self.per_channel = per_channel
        self.reduce_range = reduce_range
        self.use_external_data_format = use_external_data_format


class StaticQuantConfig(QuantConfig):
    """The arguments of `quantize_static`, with onnxruntime's defaults (activations QInt8)."""

    def __init__(
        self,
        calibration_data_reader: Any,
        calibrate_method: Any = CalibrationMethod.MinMax,
        quant_format: Any = QuantFormat.QDQ,
        activation_type: Any = QuantType.QInt8,
        weight_type: Any = QuantType.QInt8,
        op_types_to_quantize: Iterable[str] | None = None,
        nodes_to_quantize: Iterable[str] | None = None,
        nodes_to_exclude: Iterable[str] | None = None,
        per_channel: bool = False,
        reduce_range: bool = False,
        use_external_data_format: bool = False,
        calibration_providers: Sequence[Any] | None = None,
        extra_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            activation_type,
            weight_type,
            op_types_to_quantize,
            nodes_to_quantize,
            nodes_to_exclude,
            per_channel,
            reduce_range,
            use_external_data_format,
        )
        self.calibration_data_reader = calibration_data_reader
        self.calibrate_method = calibrate_method
        self.quant_format = quant_format
        self.calibration_providers = calibration_providers
        self.extra_options = dict(extra_options or {})


class DynamicQuantConfig(QuantConfig):
    """The arguments of `quantize_dynamic`."""

    def __init__(
        self,
        weight_type: Any = QuantType.QInt8,
        op_types_to_quantize: Iterable[str] | None = None,
        nodes_to_quantize: Iterable[str] | None = None,
        nodes_to_exclude: Iterable[str] | None = None,
        per_channel: bool = False,
        reduce_range: bool = False,
        use_external_data_format: bool = False,
        extra_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            QuantType.QUInt8,
            weight_type,
            op_types_to_quantize,
            nodes_to_quantize,
            nodes_to_exclude,
            per_channel,
            reduce_range,
            use_external_data_format,
        )
        self.extra_options = dict(extra_options or {})


def get_qdq_config(
    model_input: ModelInput,
    calibration_data_reader: Any,
    calibrate_method: Any = CalibrationMethod.MinMax,
    calibrate_args: Mapping[str, Any] | None = None,
    activation_type: Any = QuantType.QUInt8,
    weight_type: Any = QuantType.QInt8,
    activation_symmetric: bool = False,
    weight_symmetric: bool | None = None,
    per_channel: bool = False,
    reduce_range: bool = False,
    keep_removable_activations: bool = False,
    min_real_range: float | None = None,
    tensor_quant_overrides: Mapping[str, Any] | None = None,
    calibration_providers: Sequence[str] | None = None,
    op_types_to_quantize: Iterable[str] | None = None,
    nodes_to_exclude: Iterable[str]
    | Callable[[onnx.ModelProto, onnx.NodeProto], bool]
    | None = None,
    extra_options: Mapping[str, Any] | None = None,
) -> StaticQuantConfig:
    """A QDQ StaticQuantConfig for the whole model: every op type of the model is asked for
    (turnout quantizes those it can), the symmetry, range and activation options become
    extra_options, and a callable `nodes_to_exclude` is asked about each node."""
    model = load_model(model_input)
    if callable(nodes_to_exclude):
        excluded = [n.name for n in model.graph.node if nodes_to_exclude(model, n)]
    else:
        excluded = list(nodes_to_exclude or [])
    ops = op_types_to_quantize or sorted({n.op_type for n in model.graph.node} - _NEVER)
    options: dict[str, Any] = {
        "ActivationSymmetric": activation_symmetric,
        "MinimumRealRange": min_real_range,
        "QDQKeepRemovableActivations": keep_removable_activations,
        "TensorQuantOverrides": dict(tensor_quant_overrides or {}),
    }
    if weight_symmetric is not None:
        options["WeightSymmetric"] = weight_symmetric
    for key, value in (calibrate_args or {}).items():
        options[_CALIBRATE_ARGS.get(key, key)] = value
    options.update(extra_options or {})
    return StaticQuantConfig(
        calibration_data_reader,
        calibrate_method=calibrate_method,
        quant_format=QuantFormat.QDQ,
        activation_type=activation_type,
        weight_type=weight_type,
        op_types_to_quantize=ops,
        nodes_to_exclude=excluded,
        per_channel=per_channel,
        reduce_range=reduce_range,
        calibration_providers=calibration_providers,
        extra_options=options,
    )


_NEVER = {"QuantizeLinear", "DequantizeLinear"}
# get_qdq_config's calibrate_args keys -> quantize_static's extra_options keys
_CALIBRATE_ARGS = {
    "moving_average": "CalibMovingAverage",
    "averaging_constant": "CalibMovingAverageConstant",
    "num_bins": "CalibNumBins",
    "num_quantized_bins": "CalibNumQuantizedBins",
    "percentile": "CalibPercentile",
}


def quantize(model_input: ModelInput, model_output: ModelInput, quant_config: QuantConfig) -> None:
    """Quantize `model_input` into `model_output` as `quant_config` says (static or dynamic)."""
    c = quant_config
    if isinstance(c, StaticQuantConfig):
        quantize_static(
            model_input,
            model_output,
            c.calibration_data_reader,
            calibrate_method=c.calibrate_method,
            quant_format=c.quant_format,
            activation_type=c.activation_type,
            weight_type=c.weight_type,
            op_types_to_quantize=c.op_types_to_quantize,
            nodes_to_quantize=c.nodes_to_quantize,
            nodes_to_exclude=c.nodes_to_exclude,
            per_channel=c.per_channel,
            reduce_range=c.reduce_range,
            use_external_data_format=c.use_external_data_format,
            calibration_providers=c.calibration_providers,
            extra_options=c.extra_options,
        )
    elif isinstance(c, DynamicQuantConfig):
        quantize_dynamic(
            model_input,
            model_output,
            weight_type=c.weight_type,
            op_types_to_quantize=c.op_types_to_quantize,
            nodes_to_quantize=c.nodes_to_quantize,
            nodes_to_exclude=c.nodes_to_exclude,
            per_channel=c.per_channel,
            reduce_range=c.reduce_range,
            use_external_data_format=c.use_external_data_format,
            extra_options=c.extra_options,
        )
    else:
        raise TypeError(
            f"quant_config must be a StaticQuantConfig or DynamicQuantConfig, "
            f"not {type(c).__name__}"
        )
