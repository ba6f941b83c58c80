"""Post-training quantization to 8 bits with turnout alone (no onnxruntime needed).

The API follows onnxruntime.quantization, so switching is an import change:

    from turnout.tools.quantization import QuantType, quantize_dynamic
    quantize_dynamic("model.onnx", "model.int8.onnx", weight_type=QuantType.QInt8)

`quantize_dynamic` stores int8 weights and quantizes activations at run time;
`quantize_static` calibrates activation ranges by running the model on turnout over a
`CalibrationDataReader` and writes QuantizeLinear/DequantizeLinear (QDQ) pairs;
`quant_pre_process` folds BatchNormalization into Conv (and the like) first. Outputs use
standard ONNX ops only and run on turnout and onnxruntime alike (docs/quantization.md).
"""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule
from turnout.tools.quantization.calibrate import (
    CalibraterBase,
    CalibrationDataReader,
    MinMaxCalibrater,
    TensorData,
    TensorsData,
    create_calibrator,
)
from turnout.tools.quantization.dynamic import quantize_dynamic
from turnout.tools.quantization.qdq_quantizer import QDQQuantizer
from turnout.tools.quantization.quantize import (
    DynamicQuantConfig,
    QuantizationMode,
    StaticQuantConfig,
    get_qdq_config,
    quantize,
)
from turnout.tools.quantization.selection import NothingToQuantize
from turnout.tools.quantization.shape_inference import quant_pre_process
from turnout.tools.quantization.static import quantize_static
from turnout.tools.quantization.types import CalibrationMethod, QuantFormat, QuantType

__all__ = [
    "CalibraterBase",
    "CalibrationDataReader",
    "CalibrationMethod",
    "DynamicQuantConfig",
    "MinMaxCalibrater",
    "NothingToQuantize",
    "QDQQuantizer",
    "QuantFormat",
    "QuantType",
    "QuantizationMode",
    "StaticQuantConfig",
    "TensorData",
    "TensorsData",
    "create_calibrator",
    "get_qdq_config",
    "quant_pre_process",
    "quantize",
    "quantize_dynamic",
    "quantize_static",
]


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
