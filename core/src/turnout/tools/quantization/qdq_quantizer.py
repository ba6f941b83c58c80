"""onnxruntime's `QDQQuantizer` class on turnout's static quantizer: built with the ranges a
calibrator computed (`tensors_range`), `quantize_model()` gives the QDQ model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import onnx

from turnout.tools.quantization.calibrate import KnownRanges
from turnout.tools.quantization.static import quantize_static
from turnout.tools.quantization.types import QuantFormat, QuantType

__all__ = ["QDQQuantizer"]


class QDQQuantizer:
    """onnxruntime's positional arguments: model, per_channel, reduce_range, weight_qType,
    activation_qType, tensors_range, nodes_to_quantize, nodes_to_exclude,
    op_types_to_quantize, extra_options. The ranges replace calibration; every input and output
    of a node to quantize needs one. The types are QuantTypes or, as onnxruntime's
    quantize_static passes them, ONNX element types (`TensorProto.INT8`, ...)."""

    def __init__(
        self,
        model: onnx.ModelProto,
        per_channel: bool,
        reduce_range: bool,
        weight_qType: Any,
        activation_qType: Any,
        tensors_range: Mapping[str, Any],
        nodes_to_quantize: Iterable[str] | None,
        nodes_to_exclude: Iterable[str] | None,
        op_types_to_quantize: Iterable[str] | None,
        extra_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.per_channel = per_channel
        self.reduce_range = reduce_range
        self.weight_qType = weight_qType
        self.activation_qType = activation_qType
        self.tensors_range = tensors_range
        self.nodes_to_quantize = list(nodes_to_quantize or [])
        self.nodes_to_exclude = list(nodes_to_exclude or [])
        self.op_types_to_quantize = list(op_types_to_quantize or [])
        self.extra_options = dict(extra_options or {})

    def quantize_model(self) -> onnx.ModelProto:
        """The QDQ model (the given model is left unchanged)."""
        ranges = {name: _range(value) for name, value in self.tensors_range.items()}
        return quantize_static(
            self.model,
            None,
            KnownRanges(ranges),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=self.op_types_to_quantize,
            per_channel=self.per_channel,
            reduce_range=self.reduce_range,
            activation_type=_quant_type(self.activation_qType),
            weight_type=_quant_type(self.weight_qType),
            nodes_to_quantize=self.nodes_to_quantize,
            nodes_to_exclude=self.nodes_to_exclude,
            extra_options=self.extra_options,
        )


def _quant_type(value: Any) -> Any:
    """An ONNX element type (an int) as its QuantType; anything else as it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        for q in QuantType:
            if q.tensor_type == value:
                return q
    return value


def _range(value: Any) -> tuple[Any, Any]:
    """(min, max) of a TensorData (turnout's or onnxruntime's) or of a pair."""
    if hasattr(value, "range_value"):
        return tuple(value.range_value)
    low, high = value
    return low, high
