"""onnxruntime.quantization's configuration objects and `quantize(model, output, config)`, on
turnout's quantizers: `StaticQuantConfig` runs `quantize_static`, `DynamicQuantConfig`
`quantize_dynamic`, and `get_qdq_config` fills a StaticQuantConfig the way onnxruntime's does
(its keyword arguments become extra_options)."""

from __future__ import annotations

import inspect
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


# each config's parameters, in onnxruntime's positional order, with their defaults
_SHARED = (
    ("op_types_to_quantize", None),
    ("nodes_to_quantize", None),
    ("nodes_to_exclude", None),
    ("per_channel", False),
    ("reduce_range", False),
    ("use_external_data_format", False),
)
_LISTS = {"op_types_to_quantize", "nodes_to_quantize", "nodes_to_exclude"}


class QuantConfig:
    """What both kinds of quantization take (onnxruntime's base class of the configs). Each
    subclass lists its parameters once, in onnxruntime's order (`_parameters`); the
    constructor takes them positionally or by name, as onnxruntime's do."""

    _parameters: tuple[tuple[str, Any], ...] = (
        ("activation_type", QuantType.QUInt8),
        ("weight_type", QuantType.QInt8),
        *_SHARED,
    )
    _fixed: dict[str, Any] = {}  # attributes the subclass sets without a parameter
    activation_type: Any
    weight_type: Any
    op_types_to_quantize: list[str]
    nodes_to_quantize: list[str]
    nodes_to_exclude: list[str]
    per_channel: bool
    reduce_range: bool
    use_external_data_format: bool
    extra_options: dict[str, Any]

    def __init_subclass__(cls) -> None:
        cls.__signature__ = _signature(cls._parameters)  # type: ignore[attr-defined]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = _signature(self._parameters).bind(*args, **kwargs)
        bound.apply_defaults()
        for name, value in {**self._fixed, **bound.arguments}.items():
            if name in _LISTS:
                value = list(value or [])
            elif name == "extra_options":
                value = dict(value or {})
            setattr(self, name, value)


def _signature(parameters: Iterable[tuple[str, Any]]) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature(
        [inspect.Parameter(name, kind, default=default) for name, default in parameters]
    )


QuantConfig.__signature__ = _signature(QuantConfig._parameters)  # type: ignore[attr-defined]


class StaticQuantConfig(QuantConfig):
    """The arguments of `quantize_static`, with onnxruntime's defaults (activations QInt8)."""

    _parameters = (
        ("calibration_data_reader", inspect.Parameter.empty),
        ("calibrate_method", CalibrationMethod.MinMax),
        ("quant_format", QuantFormat.QDQ),
        ("activation_type", QuantType.QInt8),
        ("weight_type", QuantType.QInt8),
        *_SHARED,
        ("calibration_providers", None),
        ("extra_options", None),
    )
    calibration_data_reader: Any
    calibrate_method: Any
    quant_format: Any
    calibration_providers: Sequence[Any] | None


class DynamicQuantConfig(QuantConfig):
    """The arguments of `quantize_dynamic`."""

    _parameters = (("weight_type", QuantType.QInt8), *_SHARED, ("extra_options", None))
    _fixed = {"activation_type": QuantType.QUInt8}


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
    if isinstance(c, StaticQuantConfig | DynamicQuantConfig):
        # the config's parameters are the function's, by the same names
        arguments = {name: getattr(c, name) for name, _ in c._parameters}
        quantize_fn: Any = quantize_static if isinstance(c, StaticQuantConfig) else quantize_dynamic
        quantize_fn(model_input, model_output, **arguments)
    else:
        raise TypeError(
            f"quant_config must be a StaticQuantConfig or DynamicQuantConfig, "
            f"not {type(c).__name__}"
        )
