"""onnxruntime.quantization.quant_utils' names that scripts import: the enums, the suffixes of
quantized names, and the scale / zero-point arithmetic, on turnout's (`params.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from turnout.tools.quantization.graph import load_model
from turnout.tools.quantization.quantize import QuantizationMode
from turnout.tools.quantization.types import QuantFormat, QuantType, quant_range

__all__ = [
    "DEQUANT_OP_NAME",
    "DEQUANT_OUTPUT_SUFFIX",
    "QUANT_INPUT_SUFFIX",
    "QUANT_OP_NAME",
    "TENSOR_NAME_QUANT_SUFFIX",
    "QuantFormat",
    "QuantType",
    "QuantizationMode",
    "attribute_to_kwarg",
    "compute_scale_zp",
    "find_by_name",
    "get_opset_version",
    "get_qmin_qmax_for_qType",
    "get_qrange_for_qType",
    "load_model_with_shape_infer",
    "ms_domain",
    "quantize_nparray",
    "save_and_reload_model_with_shape_infer",
    "tensor_proto_to_array",
]

QUANT_OP_NAME = "QuantizeLinear"
QUANT_INPUT_SUFFIX = "_QuantizeLinear_Input"
DEQUANT_OP_NAME = "DequantizeLinear"
DEQUANT_OUTPUT_SUFFIX = "_DequantizeLinear_Output"
TENSOR_NAME_QUANT_SUFFIX = "_quantized"
ms_domain = "com.microsoft"

_BY_TENSOR_TYPE = {t.tensor_type: t for t in QuantType if t.name not in ("QInt4", "QUInt4")}


def _qtype(qtype: Any) -> QuantType:
    if isinstance(qtype, int) and qtype in _BY_TENSOR_TYPE:
        return _BY_TENSOR_TYPE[qtype]
    return QuantType.of(qtype, "qType")


def get_qmin_qmax_for_qType(
    qType: Any,
    reduce_range: bool = False,
    symmetric: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(qmin, qmax) of a QuantType or ONNX element type, as arrays of its dtype."""
    qtype = _qtype(qType)
    lo, hi = quant_range(qtype, symmetric, reduce_range)
    return np.array(lo, qtype.dtype), np.array(hi, qtype.dtype)


def get_qrange_for_qType(
    qType: Any,
    reduce_range: bool = False,
    symmetric: bool = False,
) -> Any:
    qmin, qmax = get_qmin_qmax_for_qType(qType, reduce_range, symmetric)
    return qmax.astype(np.int64) - qmin.astype(np.int64)


def compute_scale_zp(
    rmin: Any,
    rmax: Any,
    qmin: Any,
    qmax: Any,
    symmetric: bool = False,
    min_real_range: float | None = None,
) -> list[np.ndarray]:
    """[zero point, scale] mapping [rmin, rmax] (widened to hold 0) onto [qmin, qmax]."""
    if qmin > 0 or qmax < 0:
        raise ValueError(f"qmin and qmax must meet qmin <= 0 <= qmax: qmin={qmin}, qmax={qmax}")
    rmin = np.asarray(rmin)
    rmax = np.asarray(rmax)
    dtype = rmax.dtype if rmax.dtype.kind == "f" else np.dtype(np.float32)
    lo = np.minimum(rmin.astype(np.float64), 0.0)
    hi = np.maximum(rmax.astype(np.float64), 0.0)
    if min_real_range is not None:
        hi = np.maximum(hi, lo + min_real_range)
    if symmetric:
        hi = np.maximum(-lo, hi)
        lo = -hi
    qlo, qhi = float(qmin), float(qmax)
    scale = (hi - lo) / (qhi - qlo)
    zdtype = np.asarray(qmin).dtype
    if scale < np.finfo(dtype).tiny:
        return [np.array(0, zdtype), np.array(1.0, dtype)]
    zero = np.round((qlo + qhi) / 2.0) if symmetric else np.round(qlo - lo / scale)
    return [np.array(zero, zdtype), np.array(scale, dtype)]


def quantize_nparray(
    qType: Any,
    arr: np.ndarray,
    scale: Any,
    zero_point: Any,
    low: Any = None,
    high: Any = None,
) -> np.ndarray:
    """round(arr / scale) + zero_point, saturated to `qType` (or to [low, high])."""
    qtype = _qtype(qType)
    x = np.asarray(arr, np.float32) / np.asarray(scale, np.float32)
    if qtype.is_float8:
        return np.asarray(np.clip(x, -448.0, 448.0).astype(qtype.dtype))
    qmin, qmax = get_qmin_qmax_for_qType(qtype)
    lo = qmin if low is None else low
    hi = qmax if high is None else high
    q = np.rint(x) + np.asarray(zero_point, np.float64)
    return np.asarray(np.clip(q, lo, hi).astype(qtype.dtype))


def attribute_to_kwarg(attribute: onnx.AttributeProto) -> dict[str, Any]:
    """{name: value} of a node attribute, for helper.make_node(**kwargs)."""
    return {attribute.name: helper.get_attribute_value(attribute)}


def find_by_name(item_name: str, item_list: Any) -> Any:
    """The first item of `item_list` whose `.name` is `item_name`, or None."""
    return next((item for item in item_list if item.name == item_name), None)


def get_opset_version(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def load_model_with_shape_infer(model_path: str | Path) -> onnx.ModelProto:
    return shape_inference.infer_shapes(load_model(model_path))


def save_and_reload_model_with_shape_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    return shape_inference.infer_shapes(load_model(model))


def tensor_proto_to_array(initializer: TensorProto) -> np.ndarray:
    if initializer.data_type not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        raise ValueError(
            f"Only float type is supported. Weights {initializer.name} is {initializer}"
        )
    return numpy_helper.to_array(initializer)
