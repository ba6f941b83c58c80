"""Linear quantization's attributes, parameter layouts and integer ranges (QuantizeLinear,
DequantizeLinear and the ops built on them).

A scale or zero point is per tensor, per axis or blocked; `expand_param` turns each into an
array that broadcasts against the input, with the op's checks, on any array module (numpy,
CuPy), so a malformed node is the same `InvalidArgument` on every provider.
`dynamic_quant_range` and `dynamic_quant_params` are DynamicQuantizeLinear's range, scale and
zero point, for every kernel that rounds an activation to uint8 at run time (`dynamic_quantize`
the whole op in numpy). `exact_runs` and `code_magnitude` say how 8-bit integer products can be
computed exactly in float32.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from turnout.graph.dtypes import np_dtype
from turnout.graph.errors import InvalidArgument
from turnout.sdk.semantics.shape import norm_axis

__all__ = [
    "attr_dtype",
    "code_magnitude",
    "compute_dtype",
    "dynamic_quant_params",
    "dynamic_quant_range",
    "dynamic_quantize",
    "exact_runs",
    "expand_param",
    "int_range",
    "quant_axis_block",
]


def int_range(dt: Any) -> tuple[int, int] | None:
    """(min, max) of an integer quantized type (int4/uint4 included), None for the float8/float4
    types."""
    dt = np.dtype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return int(info.min), int(info.max)
    try:
        info2 = ml_dtypes.iinfo(dt)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError):
        return None
    return int(info2.min), int(info2.max)


def dynamic_quant_params(lo: Any, hi: Any) -> tuple[np.float32, np.float32]:
    """DynamicQuantizeLinear's uint8 (scale, zero point) for an input whose float32 minimum and
    maximum are `lo` and `hi`, in onnxruntime's order (GetQuantizationParameter): the range is
    widened to hold 0; scale = (hi - lo) / 255 in float32 (1 for an all-zero range, never a
    zero divisor); zero point = clamp(0 - lo / scale, 0, 255) in float32, rounded half to even
    (returned as a float32 integer value).

    The codes are then clamp(round_half_even(x / scale) + zero point, 0, 255) with a true
    float32 division, as MLAS's QuantizeLinear kernels (SSE2, AVX2, AVX-512) divide: 1 / scale
    as a multiplier differs in the last bit and flips codes near ties. Clamping before or after
    the rounding gives the same code (the bounds are integers)."""
    zero = np.float32(0)
    lo32 = min(np.float32(lo), zero)
    hi32 = max(np.float32(hi), zero)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.float32(1) if hi32 == lo32 else np.float32((hi32 - lo32) / np.float32(255))
        zp = np.float32(np.rint(min(max(zero - lo32 / scale, zero), np.float32(255))))
    if np.isnan(zp):  # a range from -inf (-inf / inf): onnxruntime's is 255
        zp = np.float32(255)
    return scale, zp


def dynamic_quant_range(x: np.ndarray) -> tuple[np.float32, np.float32]:
    """The (min, max) DynamicQuantizeLinear's scale is taken from: the input's NaNs left out
    (onnxruntime's range of [nan, 1, 2] is [1, 2]), (0, 0) for an empty input or one of NaNs
    only (scale 1, zero point 0, as onnxruntime gives a short one; its vectorized range of a
    long run of NaNs is NaN). Its codes: NaN quantizes to 0, whatever the zero point."""
    flat = np.asarray(x, np.float32).reshape(-1)
    lo = np.fmin.reduce(flat) if flat.size else np.float32(np.nan)
    if np.isnan(lo):
        return np.float32(0), np.float32(0)
    return np.float32(lo), np.float32(np.fmax.reduce(flat))


def dynamic_quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DynamicQuantizeLinear in numpy: uint8 codes on the input's own range, bit-equal to
    onnxruntime's (x / scale, a float32 division as MLAS's, rounded half to even, plus the zero
    point, saturated; NaN to 0), with the scale (float32) and zero point (uint8)."""
    x = np.asarray(x, dtype=np.float32)
    scale, zp = dynamic_quant_params(*dynamic_quant_range(x))
    codes = np.empty(x.shape, np.float32)  # in place: an LSTM's steps each call this
    if scale < _INF32:
        np.divide(x, scale, out=codes)
    else:  # a range with an infinity: inf / inf is NaN, quantized to 0 below
        with np.errstate(invalid="ignore"):
            np.divide(x, scale, out=codes)
    np.rint(codes, out=codes)
    codes += zp
    np.fmax(codes, 0, out=codes)  # NaN -> 0 (fmax takes the number), -inf -> 0
    np.minimum(codes, 255, out=codes)
    return codes.astype(np.uint8), np.asarray(scale, np.float32), np.asarray(zp, np.uint8)


_INF32 = np.float32(np.inf)

FLOAT32_EXACT = 1 << 24
"""Integers up to this are exact in float32, and so is every sum that stays below it."""


def code_magnitude(x: np.ndarray, zp: Any) -> int:
    """The largest |x - zp| an 8-bit `x` can give: 255 with a nonzero zero point, else its
    type's (255 for uint8, 128 for int8)."""
    if zp is not None and np.any(zp):
        return 255
    return 255 if x.dtype == np.uint8 else 128


def exact_runs(rows: int, bound: int) -> list[slice]:
    """The runs of an inner dimension of `rows` whose float32 products are exact when each
    product is at most `bound` in magnitude (every partial sum below 2**24, in any order a
    BLAS sums it); their sums are then exact in float64."""
    step = max((FLOAT32_EXACT - 1) // bound, 1)
    return [slice(k, min(k + step, rows)) for k in range(0, max(rows, 1), step)]


def quant_axis_block(node: Any) -> tuple[int, int]:
    """A Q/DQ node's (axis, block_size), per its opset: axis from 13, block_size from 21."""
    axis = int(node.attr("axis", 1)) if node.since_version >= 13 else 1
    block_size = int(node.attr("block_size", 0)) if node.since_version >= 21 else 0
    if block_size < 0:
        raise InvalidArgument(f"{node.name}: block_size must be positive, got {block_size}")
    return axis, block_size


def attr_dtype(node: Any, attr: str) -> np.dtype[Any] | None:
    """The numpy dtype an element-type attribute names; None for 0 (unset: from the inputs)."""
    code = int(node.attr(attr, 0))
    try:
        return np_dtype(code) if code else None
    except KeyError:
        raise InvalidArgument(f"{node.name}: unknown {attr} type {code}") from None


def compute_dtype(dt: np.dtype[Any]) -> np.dtype[Any]:
    """The type arithmetic runs in for a scale/precision type (ml_dtypes floats -> float32)."""
    if dt.kind == "f":
        return dt
    return np.dtype(np.float32) if dt.kind == "V" else np.dtype(np.float64)


def expand_param(
    xp: Any, name: str, p: Any, shape: tuple[int, ...], axis: int, block_size: int
) -> Any:
    """Scale or zero point `p` (an `xp` array) reshaped or repeated so that it broadcasts
    against an input of `shape`: a scalar per tensor, (1, .., C, .., 1) per axis, repeated
    `block_size` times along `axis` when blocked."""
    if p.ndim == 0 or (p.size == 1 and p.ndim == 1 and block_size <= 0):
        return p.reshape(())
    rank = len(shape)
    axis = norm_axis(name, axis, rank)
    if block_size <= 0:
        if p.ndim != 1 or p.shape[0] != shape[axis]:
            raise InvalidArgument(
                f"{name}: per-axis scale/zero point of shape {tuple(p.shape)} does not match "
                f"dimension {shape[axis]} of axis {axis}"
            )
        dims = [1] * rank
        dims[axis] = p.shape[0]
        return p.reshape(dims)
    want = list(shape)
    want[axis] = -(-shape[axis] // block_size)
    if (
        p.ndim != rank
        or any(p.shape[i] != want[i] for i in range(rank) if i != axis)
        or not (p.shape[axis] - 1) * block_size < shape[axis] <= p.shape[axis] * block_size
    ):
        raise InvalidArgument(
            f"{name}: blocked scale/zero point of shape {tuple(p.shape)} does not fit input "
            f"shape {tuple(shape)} with block_size {block_size} on axis {axis}"
        )
    return xp.repeat(p, block_size, axis=axis).take(xp.arange(shape[axis]), axis=axis)
