"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear between float32 and uint8/int8
(scales and zero points per tensor or per axis; blocked quantization and the float8/int4
types stay with the numpy kernels): the Q and DQ nodes a QDQ model keeps around what the
optimizer's `fold_qdq` cannot fold (residual Adds, pools), and the activations of a
dynamically quantized model.

One pass each, as onnxruntime computes them: quantize `clamp(x / scale)` rounded half to even
(by adding and subtracting 1.5 * 2**23, exact once clamped) plus the zero point; dequantize
`float32(q - zero_point) * scale`. Numpy's kernels take a pass per operation (divide, round,
add, clip, cast). The input is viewed as (outer, axis, inner), so a per-axis parameter is one
value per inner run.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.quant import dynamic_quant_params, dynamic_quant_range
from turnout.sdk.semantics.shape import norm_axis

from ..codegen import numba_array
from ..registry import BuildContext, numba_kernel
from .quant_matmul import EIGHT_BIT

__all__ = ["DynamicQuantizer", "quantizer"]

Array = np.ndarray[Any, Any]


def _quantize(x: Any, scale: Any, zp: Any, out: Any, lo: Any, hi: Any) -> None:  # pragma: no cover
    """out[i, k, j] = clamp(round(x[i, k, j] / scale[k]) + zp[k], lo, hi); NaN gives lo."""
    o, c, n = x.shape
    ss = 1 if scale.shape[0] > 1 else 0  # (strides set before the parallel loop)
    zs = 1 if zp.shape[0] > 1 else 0
    for t in prange(o * c):
        i = t // c
        k = t - i * c
        s = scale[k * ss]
        z = zp[k * zs]
        flo = np.float32(lo - z)
        fhi = np.float32(hi - z)
        src = x[i, k]
        dst = out[i, k]
        for j in range(n):
            v = src[j] / s
            if not v >= flo:  # NaN too: the lowest code, as onnxruntime's
                v = flo
            v = min(v, fhi)
            v = (v + np.float32(12582912.0)) - np.float32(12582912.0)
            dst[j] = np.int32(v) + z


def _dequantize(q: Any, scale: Any, zp: Any, out: Any) -> None:  # pragma: no cover
    """out[i, k, j] = float32(q[i, k, j] - zp[k]) * scale[k]."""
    o, c, n = q.shape
    ss = 1 if scale.shape[0] > 1 else 0
    zs = 1 if zp.shape[0] > 1 else 0
    for t in prange(o * c):
        i = t // c
        k = t - i * c
        s = scale[k * ss]
        z = zp[k * zs]
        src = q[i, k]
        dst = out[i, k]
        for j in range(n):
            dst[j] = np.float32(np.int32(src[j]) - z) * s


_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)


def _arr(dt: Any, ndim: int, readonly: bool) -> Any:
    return numba_array(np.dtype(dt), ndim, readonly=readonly, layout="C")


def quantizer(ctx: BuildContext, outs: tuple[str, ...] = EIGHT_BIT) -> Any:
    """The compiled quantize pass into the 8-bit types `outs`."""
    vec_f, vec_i = _arr(_F32, 1, True), _arr(_I32, 1, True)
    sigs = [
        types.void(_arr(_F32, 3, True), vec_f, vec_i, _arr(dt, 3, False), types.int32, types.int32)
        for dt in outs
    ]
    return ctx.jit(_quantize, sigs)


class DynamicQuantizer:
    """DynamicQuantizeLinear as onnxruntime computes it: scale and zero point of the input's
    range by `turnout.sdk.semantics.quant.dynamic_quant_params`, then one quantize pass (a float32
    division, as MLAS).
    `__call__(x)` returns (uint8 values shaped as x, scale, zero point)."""

    def __init__(self, ctx: BuildContext) -> None:
        self.quant = quantizer(ctx, ("uint8",))

    def __call__(self, x: Array) -> tuple[Array, np.float32, np.uint8]:
        flat = np.ascontiguousarray(x, np.float32).reshape(-1)
        # numpy's reductions are vectorized (5x a compiled loop of dependent compares, which
        # does not vectorize without fast-math)
        scale, zp = dynamic_quant_params(*dynamic_quant_range(flat))
        y = np.empty(x.shape, np.uint8)
        self.quant(flat.size, flat.reshape(1, 1, -1), np.full(1, scale, np.float32),
                   np.full(1, int(zp), np.int32), y.reshape(1, 1, -1), 0, 255)  # fmt: skip
        return y, scale, np.uint8(zp)


def _axis_view(name: str, shape: tuple[int, ...], p: Array, axis: int) -> tuple[int, int, int]:
    """(outer, axis, inner) of `shape` for a parameter `p` per tensor or per `axis`."""
    size = math.prod(shape)
    if p.size == 1:
        return 1, 1, size
    a = norm_axis(name, axis, len(shape))
    if p.ndim != 1 or p.shape[0] != shape[a]:
        raise InvalidArgument(
            f"{name}: per-axis scale/zero point of shape {p.shape} does not match "
            f"axis {axis} of input {shape}"
        )
    return math.prod(shape[:a]), shape[a], math.prod(shape[a + 1 :])


def _params(name: str, scale: Array, zp: Any, dt: Any) -> tuple[Array, Array]:
    s = np.ascontiguousarray(scale, np.float32).reshape(-1)
    if zp is None:
        return s, np.zeros(1, np.int32)
    if zp.dtype != dt:
        raise InvalidArgument(f"{name}: zero point type {zp.dtype} differs from {dt}")
    z = np.ascontiguousarray(zp, np.int32).reshape(-1)
    if z.size != s.size:
        raise InvalidArgument(f"{name}: scale {scale.shape} and zero point {zp.shape} differ")
    return s, z


def _axis(kn: KernelNode) -> int:
    return int(kn.attr("axis", 1)) if kn.since_version >= 13 else 1


def _plain(kn: KernelNode) -> str | None:
    """Why not (blocked quantization or a precision attribute), else None."""
    if int(kn.attr("block_size", 0) or 0):
        return "blocked quantization is not compiled by numba"
    if int(kn.attr("precision", 0) or 0):
        return "a precision attribute is not compiled by numba"
    return None


def _float_scale(kn: KernelNode) -> str | None:
    s = kn.inputs[1] if len(kn.inputs) > 1 else None
    if s is None or s.elem_type is None or s.dtype != np.float32:
        return f"{kn.op_type} with a scale other than float32 is not compiled by numba"
    return None


def _q_applies(kn: KernelNode) -> str | None:
    x, y = kn.inputs[0], kn.outputs[0]
    if x is None or x.elem_type is None or x.dtype != np.float32:
        return "QuantizeLinear of other than float32 is not compiled by numba"
    if y is None or y.elem_type is None or y.dtype.name not in EIGHT_BIT:
        return "QuantizeLinear into other than uint8/int8 is not compiled by numba"
    return _plain(kn) or _float_scale(kn)


def _build_q(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name, axis = kn.name, _axis(kn)
    out = np.dtype(kn.outputs[0].dtype)
    lo, hi = int(np.iinfo(out).min), int(np.iinfo(out).max)
    quant = quantizer(ctx, (out.name,))

    def run(x: Array, scale: Array, zp: Any = None) -> tuple[Array]:
        if x.dtype != np.float32:
            raise InvalidArgument(f"{name}: input must be float32, got {x.dtype}")
        s, z = _params(name, scale, zp, out)
        view = _axis_view(name, x.shape, s, axis)
        y = np.empty(x.shape, out)
        x3 = np.ascontiguousarray(x).reshape(view)
        quant(x.size, x3, s, z, y.reshape(view), lo, hi)
        return (y,)

    return run


def _dq_applies(kn: KernelNode) -> str | None:
    x = kn.inputs[0]
    if x is None or x.elem_type is None or x.dtype.name not in (*EIGHT_BIT, "int32"):
        return "DequantizeLinear of other than uint8/int8/int32 is not compiled by numba"
    y = kn.outputs[0]
    if y is None or y.elem_type is None or y.dtype != np.float32:
        return "DequantizeLinear into other than float32 is not compiled by numba"
    return _plain(kn) or _float_scale(kn)


def _build_dq(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name, axis = kn.name, _axis(kn)
    dt = np.dtype(kn.inputs[0].dtype)
    vec_f, vec_i = _arr(_F32, 1, True), _arr(_I32, 1, True)
    deq = ctx.jit(_dequantize, [types.void(_arr(dt, 3, True), vec_f, vec_i, _arr(_F32, 3, False))])

    def run(x: Array, scale: Array, zp: Any = None) -> tuple[Array]:
        if x.dtype != dt:
            raise InvalidArgument(f"{name}: input must be {dt}, got {x.dtype}")
        s, z = _params(name, scale, zp, dt)
        view = _axis_view(name, x.shape, s, axis)
        y = np.empty(x.shape, np.float32)
        deq(x.size, np.ascontiguousarray(x).reshape(view), s, z, y.reshape(view))
        return (y,)

    return run


def _dql_applies(kn: KernelNode) -> str | None:
    x = kn.inputs[0]
    if x is None or x.elem_type is None or x.dtype != np.float32:
        return "DynamicQuantizeLinear of other than float32 is not compiled by numba"
    return None


def _build_dql(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dq = DynamicQuantizer(ctx)

    def run(x: Array) -> tuple[Array, Array, Array]:
        y, scale, zp = dq(x)
        return y, np.asarray(scale, np.float32), np.asarray(zp, np.uint8)

    return run


numba_kernel("QuantizeLinear", since=10, applies=_q_applies)(_build_q)
numba_kernel("DequantizeLinear", since=10, applies=_dq_applies)(_build_dq)
numba_kernel("DynamicQuantizeLinear", since=11, applies=_dql_applies)(_build_dql)
