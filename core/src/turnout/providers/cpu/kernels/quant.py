"""Linear quantization kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Scales and zero points come in three granularities (per tensor, per axis, blocked);
`turnout.sdk.semantics.quant.expand_param` turns each into an array that broadcasts against the
input, with the checks every provider shares. Conversion into the
float8/float4 output types reuses Cast's `convert`, so saturation follows the Cast tables.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.cast import convert
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.quant import (
    attr_dtype,
    compute_dtype,
    dynamic_quantize,
    expand_param,
    int_range,
    quant_axis_block,
)

__all__ = ["dequantize", "quantize"]


def quantize(
    x: np.ndarray, scale: Any, zero_point: Any, dt: np.dtype[Any] | type[Any]
) -> np.ndarray:
    """x / scale rounded half to even, plus the zero point, saturated to the integer type `dt`,
    in float32 as onnxruntime requantizes (NaN to the lowest code, as onnxruntime's); scale and
    zero point broadcast against x."""
    q = np.rint(np.asarray(x, np.float32) / np.asarray(scale, np.float32))
    if zero_point is not None:
        q = q + np.asarray(zero_point).astype(np.float32)
    bounds = int_range(np.dtype(dt))
    if bounds is None:
        raise InvalidArgument(f"requantization into {np.dtype(dt)}, not an integer type")
    return np.clip(np.nan_to_num(q, nan=bounds[0]), bounds[0], bounds[1]).astype(dt)


def dequantize(q: np.ndarray, scale: Any, zero_point: Any = None) -> np.ndarray:
    """(q - zero_point) * scale in float32; scale and zero point broadcast against q."""
    d = np.asarray(q).astype(np.int32)
    if zero_point is not None:
        d = d - np.asarray(zero_point).astype(np.int32)
    out: np.ndarray = d.astype(np.float32) * np.asarray(scale, np.float32)
    return out


@cpu_kernel("QuantizeLinear", since=10)
def quantize_linear(node: KernelNode) -> KernelFn:
    axis, block_size = quant_axis_block(node)
    saturate = bool(node.attr("saturate", 1))
    out_dt = attr_dtype(node, "output_dtype")
    prec_dt = attr_dtype(node, "precision")
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
        rng = int_range(dt)
        # the division runs in the scale's precision unless `precision` says otherwise
        pdt = prec_dt if prec_dt is not None else scale.dtype
        cdt = compute_dtype(pdt)
        s = expand_param(np, name, scale, x.shape, axis, block_size)
        q = x.astype(cdt) / s.astype(cdt)
        if cdt != pdt:  # e.g. bfloat16 precision: round the quotient to that type
            q = q.astype(pdt).astype(cdt)
        if rng is None:  # float8 / float4 outputs
            if zero_point is not None:
                zp = expand_param(np, name, zero_point, x.shape, axis, block_size)
                q = q + zp.astype(cdt)
            return (convert(q, dt, saturate),)
        r = np.rint(q).astype(np.float64)
        if zero_point is not None:
            zp = expand_param(np, name, zero_point, x.shape, axis, block_size)
            r = r + zp.astype(np.float64)
        r = np.clip(np.nan_to_num(r, nan=rng[0]), rng[0], rng[1])  # NaN: the lowest code
        if dt.kind == "V":
            return (r.astype(np.int8 if rng[0] < 0 else np.uint8).astype(dt),)
        return (r.astype(dt),)

    return run


@cpu_kernel("DequantizeLinear", since=10)
def dequantize_linear(node: KernelNode) -> KernelFn:
    axis, block_size = quant_axis_block(node)
    out_dt = attr_dtype(node, "output_dtype")
    name = node.name

    def run(
        x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None
    ) -> tuple[np.ndarray]:
        x = np.asarray(x)
        scale = np.asarray(scale)
        dt = out_dt if out_dt is not None else scale.dtype
        s = expand_param(np, name, scale, x.shape, axis, block_size).astype(np.float32)
        is_int = int_range(x.dtype) is not None
        if zero_point is not None:
            zero_point = np.asarray(zero_point)
            if zero_point.dtype != x.dtype:
                raise InvalidArgument(
                    f"{name}: zero point type {zero_point.dtype} differs from input type {x.dtype}"
                )
            zp = expand_param(np, name, zero_point, x.shape, axis, block_size)
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
    """uint8 codes on the input's own range, bit-equal to onnxruntime's
    (`semantics.quant.dynamic_quantize`)."""
    return dynamic_quantize
