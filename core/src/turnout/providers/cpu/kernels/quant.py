"""Linear quantization kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Scales and zero points come in three granularities (per tensor, per axis, blocked);
`_expand_param` turns each into an array that broadcasts against the input. Conversion into the
float8/float4 output types reuses Cast's `convert`, so saturation follows the Cast tables.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ....dtypes import np_dtype
from ....errors import InvalidArgument
from ....provider import KernelFn, KernelNode
from ..registry import cpu_kernel
from .cast import convert

__all__ = ["dequantize", "quantize"]


def _int_range(dt: np.dtype[Any]) -> tuple[int, int] | None:
    """(min, max) of an integer quantized type, None for the float8/float4 types."""
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return int(info.min), int(info.max)
    try:
        info2 = ml_dtypes.iinfo(dt)
    except (ValueError, TypeError):
        return None
    return int(info2.min), int(info2.max)


def _expand_param(
    name: str, p: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int
) -> np.ndarray:
    """A scale or zero point reshaped/repeated so that it broadcasts against an input of `shape`."""
    p = np.asarray(p)
    if p.ndim == 0 or (p.size == 1 and p.ndim == 1 and block_size <= 0):
        return p.reshape(())
    rank = len(shape)
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{name}: axis {axis} is out of range for rank {rank}")
    axis %= rank
    if block_size <= 0:
        if p.ndim != 1 or p.shape[0] != shape[axis]:
            raise InvalidArgument(
                f"{name}: per-axis scale/zero point of shape {p.shape} does not match "
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
            f"{name}: blocked scale/zero point of shape {p.shape} does not fit input shape "
            f"{shape} with block_size {block_size} on axis {axis}"
        )
    return np.repeat(p, block_size, axis=axis).take(np.arange(shape[axis]), axis=axis)


def quantize(
    x: np.ndarray, scale: Any, zero_point: Any, dt: np.dtype[Any] | type[Any]
) -> np.ndarray:
    """x / scale rounded half to even, plus the zero point, saturated to the integer type `dt`,
    in float32 as onnxruntime requantizes; scale and zero point broadcast against x."""
    q = np.rint(np.asarray(x, np.float32) / np.asarray(scale, np.float32))
    if zero_point is not None:
        q = q + np.asarray(zero_point).astype(np.float32)
    bounds = _int_range(np.dtype(dt))
    if bounds is None:
        raise InvalidArgument(f"requantization into {np.dtype(dt)}, not an integer type")
    return np.clip(q, bounds[0], bounds[1]).astype(dt)


def dequantize(q: np.ndarray, scale: Any, zero_point: Any = None) -> np.ndarray:
    """(q - zero_point) * scale in float32; scale and zero point broadcast against q."""
    d = np.asarray(q).astype(np.int32)
    if zero_point is not None:
        d = d - np.asarray(zero_point).astype(np.int32)
    out: np.ndarray = d.astype(np.float32) * np.asarray(scale, np.float32)
    return out


def _quant_params(node: KernelNode) -> tuple[int, int]:
    axis = int(node.attr("axis", 1)) if node.since_version >= 13 else 1
    block_size = int(node.attr("block_size", 0)) if node.since_version >= 21 else 0
    if block_size < 0:
        raise InvalidArgument(f"{node.name}: block_size must be positive, got {block_size}")
    return axis, block_size


def _compute_dtype(dt: np.dtype[Any]) -> np.dtype[Any]:
    """The numpy type arithmetic runs in for a scale/precision type (ml floats -> float32)."""
    if dt.kind == "f":
        return dt
    return np.dtype(np.float32) if dt.kind == "V" else np.dtype(np.float64)


def _attr_dtype(node: KernelNode, attr: str) -> np.dtype[Any] | None:
    """The numpy dtype an element-type attribute names; None for 0 (unset: from the inputs)."""
    code = int(node.attr(attr, 0))
    try:
        return np_dtype(code) if code else None
    except KeyError:
        raise InvalidArgument(f"{node.name}: unknown {attr} type {code}") from None


@cpu_kernel("QuantizeLinear", since=10)
def quantize_linear(node: KernelNode) -> KernelFn:
    axis, block_size = _quant_params(node)
    saturate = bool(node.attr("saturate", 1))
    out_dt = _attr_dtype(node, "output_dtype")
    prec_dt = _attr_dtype(node, "precision")
    name = node.name

    def run(
        x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None
    ) -> tuple[np.ndarray]:
        x = np.asarray(x)
        scale = np.asarray(scale)
        dt = out_dt if out_dt is not None else np.dtype(np.uint8)
        if zero_point is not None:
            zero_point = np.asarray(zero_point)
            if out_dt is not None and zero_point.dtype != out_dt:
                raise InvalidArgument(
                    f"{name}: output_dtype {out_dt} differs from zero point type {zero_point.dtype}"
                )
            dt = zero_point.dtype
        rng = _int_range(dt)
        # the division runs in the scale's precision unless `precision` says otherwise
        pdt = prec_dt if prec_dt is not None else scale.dtype
        cdt = _compute_dtype(pdt)
        s = _expand_param(name, scale, x.shape, axis, block_size)
        q = x.astype(cdt) / s.astype(cdt)
        if cdt != pdt:  # e.g. bfloat16 precision: round the quotient to that type
            q = q.astype(pdt).astype(cdt)
        if rng is None:  # float8 / float4 outputs
            if zero_point is not None:
                zp = _expand_param(name, zero_point, x.shape, axis, block_size)
                q = q + zp.astype(cdt)
            return (convert(q, dt, saturate),)
        r = np.rint(q).astype(np.float64)
        if zero_point is not None:
            zp = _expand_param(name, zero_point, x.shape, axis, block_size)
            r = r + zp.astype(np.float64)
        r = np.clip(r, rng[0], rng[1])
        if dt.kind == "V":
            return (r.astype(np.int8 if rng[0] < 0 else np.uint8).astype(dt),)
        return (r.astype(dt),)

    return run


@cpu_kernel("DequantizeLinear", since=10)
def dequantize_linear(node: KernelNode) -> KernelFn:
    axis, block_size = _quant_params(node)
    out_dt = _attr_dtype(node, "output_dtype")
    name = node.name

    def run(
        x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None
    ) -> tuple[np.ndarray]:
        x = np.asarray(x)
        scale = np.asarray(scale)
        dt = out_dt if out_dt is not None else scale.dtype
        s = _expand_param(name, scale, x.shape, axis, block_size).astype(np.float32)
        is_int = _int_range(x.dtype) is not None
        if zero_point is not None:
            zero_point = np.asarray(zero_point)
            if zero_point.dtype != x.dtype:
                raise InvalidArgument(
                    f"{name}: zero point type {zero_point.dtype} differs from input type {x.dtype}"
                )
            zp = _expand_param(name, zero_point, x.shape, axis, block_size)
            if is_int:
                d = (x.astype(np.int64) - zp.astype(np.int64)).astype(np.float32)
            else:
                d = x.astype(np.float32) - zp.astype(np.float32)
        else:
            d = x.astype(np.float32)
        return ((d * s).astype(dt),)

    return run


@cpu_kernel("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.asarray(x, dtype=np.float32)
        lo = min(float(x.min()), 0.0) if x.size else 0.0
        hi = max(float(x.max()), 0.0) if x.size else 0.0
        # an all-zero input gets scale 1 (as onnxruntime does), never a zero divisor
        scale = np.float32(1) if hi == lo else (np.float32(hi) - np.float32(lo)) / np.float32(255)
        zp_f = np.rint(np.clip(np.float32(0) - np.float32(lo) / scale, 0, 255))
        zp = np.uint8(zp_f)
        y = np.clip(np.rint(x / scale) + zp_f, 0, 255).astype(np.uint8)
        return y, np.asarray(scale, np.float32), np.asarray(zp, np.uint8)

    return run
