"""Linear quantization on `be.xp`: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and
the integer products MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.

Attributes, scale/zero-point layouts (per tensor, per axis, blocked) and integer ranges come
from `turnout.sdk.semantics.quant`, shared with the CPU kernels. Types CuPy has no arrays for
(int4, float8, float4, bfloat16 scales or precision) are declined by `numeric_only` with the
reason. Integer products run in float64 (exact for 8-bit operands: the int32 accumulator's
value), so MatMul is cuBLAS DGEMM and the convolutions reuse `conv.im2col_conv`; a zero point
is subtracted before the product, so the padding of a convolution reads it as 0.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.quant import (
    attr_dtype,
    compute_dtype,
    expand_param,
    int_range,
    quant_axis_block,
)

from ..backend import Backend
from .conv import im2col_conv
from .registry import cuda_kernel, numeric_only

__all__: list[str] = []


def _out_dtype(kn: KernelNode, i: int = 0) -> np.dtype[Any]:
    """Output `i`'s type, known at session creation (`numeric_only` declines otherwise)."""
    dt: np.dtype[Any] = np.dtype(kn.outputs[i].dtype)
    return dt


def _int_out(kn: KernelNode) -> str | None:
    """`numeric_only`, and an integer first output (not a float8/float4 type)."""
    why = numeric_only(kn)
    if why is None and int_range(_out_dtype(kn)) is None:
        return f"{kn.op_type} into {_out_dtype(kn)} is not an integer quantization"
    return why


def _q_applies(kn: KernelNode) -> str | None:
    prec = attr_dtype(kn, "precision")
    if prec is not None and prec.kind != "f":
        return f"QuantizeLinear precision {prec} has no CuPy array type"
    return _int_out(kn)


def _saturate(xp: Any, r: Any, dt: np.dtype[Any]) -> Any:
    lo, hi = int_range(dt) or (0, 0)
    return xp.clip(xp.nan_to_num(r, nan=lo), lo, hi).astype(dt)  # NaN: the lowest code


@cuda_kernel("QuantizeLinear", 10, applies=_q_applies)
def quantize_linear(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    axis, block = quant_axis_block(kn)
    prec = attr_dtype(kn, "precision")
    dt = _out_dtype(kn)

    def run(x: Any, scale: Any, zero_point: Any = None) -> tuple[Any]:
        # the division runs in the scale's precision unless `precision` says otherwise
        cdt = compute_dtype(prec if prec is not None else scale.dtype)
        s = expand_param(xp, kn.name, scale, x.shape, axis, block)
        r = xp.rint(x.astype(cdt) / s.astype(cdt)).astype(np.float64)
        if zero_point is not None:
            r = r + expand_param(xp, kn.name, zero_point, x.shape, axis, block).astype(np.float64)
        return (_saturate(xp, r, dt),)

    return run


@cuda_kernel("DequantizeLinear", 10)
def dequantize_linear(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    axis, block = quant_axis_block(kn)
    dt = _out_dtype(kn)

    def run(x: Any, scale: Any, zero_point: Any = None) -> tuple[Any]:
        s = expand_param(xp, kn.name, scale, x.shape, axis, block).astype(np.float32)
        if zero_point is None:
            d = x.astype(np.float32)
        elif zero_point.dtype != x.dtype:
            raise InvalidArgument(
                f"{kn.name}: zero point type {zero_point.dtype} differs from input type {x.dtype}"
            )
        else:
            zp = expand_param(xp, kn.name, zero_point, x.shape, axis, block)
            wide = np.int64 if x.dtype.kind in "iu" else np.float32
            d = (x.astype(wide) - zp.astype(wide)).astype(np.float32)
        return ((d * s).astype(dt),)

    return run


@cuda_kernel("DynamicQuantizeLinear", 11)
def dynamic_quantize_linear(kn: KernelNode, be: Backend) -> KernelFn:
    """The range (min(x, 0), max(x, 0)) over 255 steps, reduced on the device; an all-zero
    range gets scale 1 (as onnxruntime), never a zero divisor. NaNs as
    `semantics.quant.dynamic_quant_range` and `dynamic_quant_params` say: left out of the
    range, quantized to 0; a zero point that is NaN (a range from -inf) is 255."""
    xp = be.xp
    f32 = np.float32

    def run(x: Any) -> tuple[Any, Any, Any]:
        x = x.astype(f32, copy=False)
        zero = xp.zeros((), f32)
        with warnings.catch_warnings(), np.errstate(invalid="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: NaN, then 0 by fmin
            lo = xp.fmin(xp.nanmin(x), zero) if x.size else zero
            hi = xp.fmax(xp.nanmax(x), zero) if x.size else zero
            scale = xp.where(hi == lo, f32(1), (hi - lo) / f32(255)).astype(f32)
            zp = xp.rint(xp.clip(zero - lo / scale, 0, 255))
            zp = xp.where(xp.isnan(zp), f32(255), zp)
            codes = xp.nan_to_num(xp.rint(x / scale) + zp, nan=0.0)
        y = xp.clip(codes, 0, 255).astype(np.uint8)
        return y, scale, zp.astype(np.uint8)

    return run


def _minus(name: str, x: Any, zp: Any, what: str) -> Any:
    """`x - zp` in float64 (exact for the 8-bit types), with a readable broadcast error."""
    xf = x.astype(np.float64)
    if zp is None:
        return xf
    try:
        return xf - zp.astype(np.float64)
    except ValueError:
        raise InvalidArgument(
            f"{name}: {what} zero point of shape {tuple(zp.shape)} does not fit input "
            f"{tuple(x.shape)}"
        ) from None


def _per_row(p: Any, a: Any) -> Any:
    """A 1-D zero point or scale of A (length M) as an (M, 1) column: per row of A."""
    if p is not None and p.ndim == 1 and p.size > 1 and a.ndim >= 2:
        return p.reshape(-1, 1)
    return p


def _int_matmul(xp: Any, name: str, a: Any, az: Any, b: Any, bz: Any) -> Any:
    aa, bb = _minus(name, a, _per_row(az, a), "A"), _minus(name, b, bz, "B")
    try:
        return xp.matmul(aa, bb)
    except ValueError as e:
        raise InvalidArgument(
            f"{name}: cannot multiply {tuple(a.shape)} by {tuple(b.shape)}: {e}"
        ) from None


@cuda_kernel("MatMulInteger", 10)
def matmul_integer(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp

    def run(a: Any, b: Any, az: Any = None, bz: Any = None) -> tuple[Any]:
        return (_int_matmul(xp, kn.name, a, az, b, bz).astype(np.int32),)

    return run


def _requantize(xp: Any, acc: Any, mult: Any, yz: Any, dt: np.dtype[Any]) -> Any:
    """acc * mult rounded half to even, plus the output zero point, saturated to `dt`."""
    y = xp.rint(acc * mult)
    if yz is not None:
        y = y + yz.astype(np.float64)
    return _saturate(xp, y, dt)


@cuda_kernel("QLinearMatMul", 10, applies=_int_out)
def qlinear_matmul(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    dt = _out_dtype(kn)

    def run(
        a: Any, a_s: Any, az: Any, b: Any, b_s: Any, bz: Any, y_s: Any, yz: Any = None
    ) -> tuple[Any]:
        acc = _int_matmul(xp, kn.name, a, az, b, bz)
        sdt = np.promote_types(a_s.dtype, np.float32)
        mult = _per_row(a_s.astype(sdt), a) * b_s.astype(sdt) / y_s.astype(sdt)
        return (_requantize(xp, acc, mult.astype(np.float64), yz, dt),)

    return run


def _channels(name: str, p: Any, m: int, nd: int, what: str) -> Any:
    """A scalar, or one value per output channel shaped to broadcast over (M, ..spatial)."""
    if p.size == 1:
        return p.reshape(())
    if p.shape != (m,):
        raise InvalidArgument(
            f"{name}: {what} of shape {tuple(p.shape)} is neither a scalar nor ({m},)"
        )
    return p.reshape((m,) + (1,) * nd)


def _int_conv(xp: Any, kn: KernelNode, group: int, x: Any, xz: Any, w: Any, wz: Any) -> Any:
    """The exact integer convolution of (x - xz) and (w - wz), in float64."""
    if xz is not None and xz.size != 1:
        raise InvalidArgument(f"{kn.name}: x_zero_point must be a scalar, got shape {xz.shape}")
    xs = _minus(kn.name, x, xz, "x")
    ws = w.astype(np.float64)
    if wz is not None:
        ws = ws - _channels(kn.name, wz, w.shape[0], w.ndim - 1, "w_zero_point").astype(np.float64)
    return im2col_conv(xp, kn, xs, ws, group)


@cuda_kernel("ConvInteger", 10)
def conv_integer(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    group = int(kn.attr("group", 1))

    def run(x: Any, w: Any, xz: Any = None, wz: Any = None) -> tuple[Any]:
        return (xp.rint(_int_conv(xp, kn, group, x, xz, w, wz)).astype(np.int32),)

    return run


@cuda_kernel("QLinearConv", 10, applies=_int_out)
def qlinear_conv(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    group = int(kn.attr("group", 1))
    dt = _out_dtype(kn)

    def run(
        x: Any, x_s: Any, xz: Any, w: Any, w_s: Any, wz: Any, y_s: Any, yz: Any, b: Any = None
    ) -> tuple[Any]:
        acc = xp.rint(_int_conv(xp, kn, group, x, xz, w, wz))
        m, nd = w.shape[0], x.ndim - 2
        if b is not None:
            if tuple(b.shape) != (m,):
                raise InvalidArgument(f"{kn.name}: B shape {tuple(b.shape)} must be ({m},)")
            acc = acc + b.astype(np.float64).reshape((m,) + (1,) * nd)
        ws = _channels(kn.name, w_s.astype(np.float64), m, nd, "w_scale")
        # the multiplier rounds to float32 once, as onnxruntime's requantization does
        mult = x_s.reshape(()).astype(np.float64) * ws / y_s.reshape(()).astype(np.float64)
        return (_requantize(xp, acc, mult.astype(np.float32).astype(np.float64), yz, dt),)

    return run
