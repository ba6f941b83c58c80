"""Scales and zero points from a float range, and the quantization of weight arrays.

The arithmetic follows onnxruntime.quantization so that both tools give the same integers for
the same range: the range always includes 0 (zero must be exactly representable, for padding
and ReLU), scale = (rmax - rmin) / (qmax - qmin), zero point = round(qmin - rmin / scale);
a symmetric range is [-absmax, absmax] with the zero point in the middle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from turnout.tools.quantization.types import QuantType, quant_range

__all__ = ["QuantParams", "params_for_range", "quantize_array", "quantize_weight"]


@dataclass(frozen=True)
class QuantParams:
    """Scale and zero point of one tensor: scalars, or 1-D along `axis` (per channel)."""

    scale: np.ndarray  # float32
    zero_point: np.ndarray  # int8 / uint8 (int32 for biases)
    axis: int | None = None


def params_for_range(
    rmin: np.ndarray | float,
    rmax: np.ndarray | float,
    qtype: QuantType,
    symmetric: bool,
    reduce_range: bool = False,
    min_real_range: float | None = None,
    scale_dtype: np.dtype | type = np.float32,
) -> QuantParams:
    """Scale and zero point mapping [rmin, rmax] (widened to hold 0, and to at least
    `min_real_range` wide) onto `qtype`. For float8 the range is read as (-std, std), the
    values' spread (CalibrationMethod.Distribution), and the zero point is 0.

    The scale is computed in float64 and stored as `scale_dtype`, the tensor's own type
    (float16 for a float16 model, as onnxruntime writes it); the zero point comes from the
    unrounded scale. A scale too small to store (below float32's smallest normal, or 0 once
    rounded to float16) becomes 1 with zero point 0, onnxruntime's rule."""
    if qtype.is_float8:
        std = np.maximum(-np.asarray(rmin, np.float64), np.asarray(rmax, np.float64))
        return _float8_params(std, scale_dtype)
    lo = np.minimum(np.asarray(rmin, np.float64), 0.0)
    hi = np.maximum(np.asarray(rmax, np.float64), 0.0)
    if min_real_range is not None:
        hi = np.maximum(hi, lo + min_real_range)
    qmin, qmax = quant_range(qtype, symmetric, reduce_range)
    if symmetric:
        hi = np.maximum(-lo, hi)
        lo = -hi
    scale = (hi - lo) / (qmax - qmin)
    stored = scale.astype(scale_dtype)
    if np.dtype(scale_dtype) == np.float16:
        empty = stored < np.finfo(np.float16).smallest_subnormal
    else:
        empty = scale < np.finfo(np.float32).tiny  # an all-zero range: onnxruntime writes 1
    safe = np.where(empty, 1.0, scale)
    if symmetric:
        zero = np.full(scale.shape, (qmin + qmax + 1) // 2 if qtype is QuantType.QUInt8 else 0)
    else:
        zero = np.clip(np.round(qmin - lo / safe), qmin, qmax)
    zero = np.where(empty, 0, zero)
    return QuantParams(np.where(empty, 1.0, stored).astype(scale_dtype), zero.astype(qtype.dtype))


def _float8_std() -> float:
    """The standard deviation of every finite float8 E4M3FN value: a tensor's scale is its
    own std over this, so that its spread fills float8's (onnxruntime's rule)."""
    from ml_dtypes import float8_e4m3fn

    values = np.arange(256, dtype=np.uint8).view(float8_e4m3fn).astype(np.float32)
    return float(np.std(values[np.isfinite(values)]))


def _float8_params(std: np.ndarray, scale_dtype: np.dtype | type = np.float32) -> QuantParams:
    from ml_dtypes import float8_e4m3fn

    scale = np.where(std > 0, std / _float8_std(), 1.0).astype(scale_dtype)
    return QuantParams(scale, np.zeros(scale.shape, float8_e4m3fn))


def quantize_array(values: np.ndarray, params: QuantParams) -> np.ndarray:
    """round(values / scale) + zero point, saturated to the integer type: QuantizeLinear's
    arithmetic (float32, ties to even), so offline weights equal what the op would give.
    float8 values are cast (saturating, as QuantizeLinear's default)."""
    scale, zero = params.scale, params.zero_point.astype(np.float64)
    if params.axis is not None:
        shape = [1] * values.ndim
        shape[params.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    if params.zero_point.dtype.kind == "V" or params.zero_point.dtype.name.startswith("float8"):
        x = values.astype(np.float32) / scale.astype(np.float32)
        return np.clip(x, -448.0, 448.0).astype(params.zero_point.dtype)
    q = np.rint(values.astype(np.float32) / scale.astype(np.float32)) + zero  # float32, as ORT
    limits = np.iinfo(params.zero_point.dtype)
    return np.clip(q, limits.min, limits.max).astype(params.zero_point.dtype)


def quantize_weight(
    weight: np.ndarray,
    qtype: QuantType,
    symmetric: bool,
    axis: int | None = None,
    reduce_range: bool = False,
) -> tuple[np.ndarray, QuantParams]:
    """`weight` quantized per tensor, or per channel along `axis` (one scale per slice); the
    scales have the weight's float type (float16 for a float16 weight)."""
    sdt = np.float16 if weight.dtype == np.float16 else np.float32
    if qtype.is_float8:
        others = None if axis is None else tuple(i for i in range(weight.ndim) if i != axis)
        params = _float8_params(np.asarray(np.std(weight.astype(np.float64), axis=others)), sdt)
        if axis is not None:
            params = QuantParams(params.scale, params.zero_point, axis % weight.ndim)
        return quantize_array(weight, params), params
    if axis is None:
        params = params_for_range(
            weight.min(), weight.max(), qtype, symmetric, reduce_range, scale_dtype=sdt
        )
    else:
        axis = axis % weight.ndim
        others = tuple(i for i in range(weight.ndim) if i != axis)
        rmin, rmax = weight.min(axis=others), weight.max(axis=others)
        p = params_for_range(rmin, rmax, qtype, symmetric, reduce_range, scale_dtype=sdt)
        params = QuantParams(p.scale, p.zero_point, axis)
    return quantize_array(weight, params), params


def quantize_bias(bias: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, QuantParams]:
    """A bias as int32 at scale = input scale * weight scale (per channel when that is a
    vector), zero point 0: the integer the accumulator of the quantized op adds. The scale
    keeps float16 when it is float16 (a float16 model's), else it is float32."""
    scale = np.asarray(scale)
    scale = scale if scale.dtype == np.float16 else scale.astype(np.float32)
    safe = np.where(scale == 0, 1.0, scale).astype(np.float64)
    limit = np.iinfo(np.int32)
    q = np.clip(np.rint(bias.astype(np.float64) / safe), limit.min, limit.max).astype(np.int32)
    axis = 0 if scale.ndim == 1 else None
    return q, QuantParams(scale, np.zeros(scale.shape, np.int32), axis)
