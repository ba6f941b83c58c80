"""com.microsoft QLinearAdd, QLinearMul, QLinearSoftmax and QLinearGlobalAveragePool on 8-bit
tensors: one compiled pass each.

A model quantized in QOperator form keeps its residual adds, biases and GELU products as
QLinearAdd/QLinearMul; numpy computes each with a pass per operation (widen, subtract, convert,
scale, add, round, clip, cast), which made them a third of a quantized BERT's time. Here each
output is computed where it is stored, with the same float32 arithmetic as the numpy kernels
(`turnout.providers.cpu.kernels.contrib_quantized_elementwise`), so the two agree bit for bit:
- QLinearAdd: `float32(a - a_zp) * (a_scale / c_scale) + float32(b - b_zp) * (b_scale / c_scale)`;
- QLinearMul: `float32(a - a_zp) * float32(b - b_zp) * (a_scale * b_scale / c_scale)`;
then rounded half to even, plus c_zp, saturated to the type.

QLinearSoftmax (over the last axis, or the trailing axes coerced to one before opset 13) reads
`exp(x_scale * (x - row max))` from a 256-entry float32 table made per run (the difference of two
codes is an integer: one exp per code instead of one per element), sums the row in float32,
and requantizes `e / sum` by y_scale (rounded half to even, saturated): within one step of
onnxruntime's table-based kernel and of numpy's float softmax.

QLinearGlobalAveragePool (channels first) sums each channel's image in int64 less the zero
point times its size, and requantizes `float32(sum) * (x_scale / (y_scale * size))`, as the
numpy kernel does.

Broadcasting: an operand of the output's shape is read as it is; the other, where its shape is
a suffix of the output's (a bias over the last axis, an attention mask over the key axis), is
one row that every output row reads, and a scalar one row of the last axis holding it; any
other broadcast is materialized first.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numba import prange, types

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.shape import cut_axis

from ..codegen import numba_array
from ..registry import BuildContext, numba_kernel
from .quant_gemm import int_range
from .quant_matmul import eight_bit_applies

__all__: list[str] = []

Array = np.ndarray[Any, Any]


def _binary(
    a: Any, a_step: Any, b: Any, b_step: Any, y: Any, rows: Any, za: Any, zb: Any, ra: Any,
    rb: Any, zc: Any, lo: Any, hi: Any, mul: Any,
) -> None:  # pragma: no cover - compiled by numba  # fmt: skip
    """y[r * L + j] = requantized(op(a[r * a_step + j], b[r * b_step + j])), L = len(y) / rows."""
    n = y.shape[0] // rows
    flo = np.float32(lo - zc)
    fhi = np.float32(hi - zc)
    for r in prange(rows):
        ar = a[r * a_step : r * a_step + n]
        br = b[r * b_step : r * b_step + n]
        yr = y[r * n : r * n + n]
        for j in range(n):
            fa = np.float32(np.int32(ar[j]) - za)
            fb = np.float32(np.int32(br[j]) - zb)
            if mul:
                v = fa * fb * ra
            else:
                v = fa * ra + fb * rb
            v = max(v, flo)
            v = min(v, fhi)
            v = (v + np.float32(12582912.0)) - np.float32(12582912.0)
            yr[j] = np.int32(v) + zc


def _softmax(
    x: Any, table: Any, ys: Any, zp: Any, lo: Any, hi: Any, y: Any
) -> None:  # pragma: no cover - compiled by numba
    """y[r] = requantized(e / sum(e)), e = table[max(x[r]) - x[r]], row by row."""
    rows, n = x.shape
    flo = np.float32(lo - zp)
    fhi = np.float32(hi - zp)
    for r in prange(rows):
        xr = x[r]
        yr = y[r]
        top = np.int32(xr[0])
        for j in range(n):
            top = max(top, np.int32(xr[j]))
        total = np.float32(0)
        for j in range(n):
            total += table[top - np.int32(xr[j])]
        for j in range(n):
            v = table[top - np.int32(xr[j])] / total / ys
            v = max(v, flo)
            v = min(v, fhi)
            v = (v + np.float32(12582912.0)) - np.float32(12582912.0)
            yr[j] = np.int32(v) + zp


def _mean_pool(
    x: Any, zx: Any, ratio: Any, zy: Any, lo: Any, hi: Any, y: Any
) -> None:  # pragma: no cover - compiled by numba
    """y[r] = requantized((sum(x[r]) - zx * len(x[r])) * ratio), row by row."""
    rows, n = x.shape
    flo = np.float32(lo - zy)
    fhi = np.float32(hi - zy)
    for r in prange(rows):
        xr = x[r]
        total = np.int64(0)
        for j in range(n):
            total += np.int64(xr[j])
        v = np.float32(total - np.int64(zx) * n) * ratio
        v = max(v, flo)
        v = min(v, fhi)
        v = (v + np.float32(12582912.0)) - np.float32(12582912.0)
        y[r] = np.int32(v) + zy


class _Layout(NamedTuple):
    """How the kernel reads two operands of these shapes: `rows` rows of `row` values; an
    operand's `step` is `row` (it has the output's shape) or 0 (one row every output row
    reads); `how` per operand: "as is", "fill" (a scalar, spread over one row) or "spread"
    (materialized to the output's shape: neither side is the output's shape or a suffix)."""

    out: tuple[int, ...]
    rows: int
    row: int
    steps: tuple[int, int]
    how: tuple[str, str]


def _layout(a_shape: tuple[int, ...], b_shape: tuple[int, ...], name: str) -> _Layout:
    try:
        out = tuple(np.broadcast_shapes(a_shape, b_shape))
    except ValueError:
        raise InvalidArgument(
            f"{name}: input shapes {[a_shape, b_shape]} do not broadcast"
        ) from None
    total = math.prod(out)

    def suffix(s: tuple[int, ...]) -> int:
        """The size of shape `s` when it (less leading 1s) ends the output's and is no scalar."""
        size = math.prod(s)
        while s and s[0] == 1:
            s = s[1:]
        return size if s and size > 1 and out[len(out) - len(s) :] == s else 0

    full = (a_shape == out, b_shape == out)
    if all(full):
        return _Layout(out, 1, total, (0, 0), ("as is", "as is"))
    if any(full):
        other = b_shape if full[0] else a_shape
        row = suffix(other)
        fill = math.prod(other) == 1 and total > 0
        if fill:  # a scalar: one row of the last axis (or everything) holding it
            row = out[-1] if out and out[-1] else total
        if row:
            how = ("as is", "fill" if fill else "as is")
            how = how if full[0] else (how[1], how[0])
            steps = (row, 0) if full[0] else (0, row)
            return _Layout(out, total // row, row, steps, how)
    return _Layout(out, 1, total, (0, 0), ("spread", "spread"))


def _operand(x: Array, how: str, lay: _Layout) -> Array:
    if how == "fill":
        return np.full(lay.row, x.reshape(-1)[0], x.dtype)
    if how == "spread":
        return np.ascontiguousarray(np.broadcast_to(x, lay.out)).reshape(-1)
    return np.ascontiguousarray(x).reshape(-1)


def _scalar(name: str, what: str, v: Any, dt: Any = None) -> Any:
    """A per-tensor scale or zero point (onnxruntime takes no other for these ops)."""
    if v is None:
        return None
    if np.size(v) != 1:
        raise InvalidArgument(f"{name}: {what} must be a scalar, got shape {np.shape(v)}")
    if dt is not None and np.asarray(v).dtype != dt:
        raise InvalidArgument(f"{name}: {what} type {np.asarray(v).dtype} is not {dt}")
    return np.asarray(v).reshape(())


def _build(kn: KernelNode, ctx: BuildContext, mul: bool) -> KernelFn:
    name = kn.name
    dt = np.dtype(kn.inputs[0].dtype)
    lo, hi = int_range(dt)
    vec = numba_array(dt, 1, readonly=True, layout="C")
    f32, i32, i64 = types.float32, types.int32, types.int64
    sig = types.void(
        vec, i64, vec, i64, numba_array(dt, 1, readonly=False, layout="C"), i64,
        i32, i32, f32, f32, i32, i32, i32, types.boolean,
    )  # fmt: skip
    kernel = ctx.jit(_binary, [sig])

    kept: list[Any] = [None]  # the last scales and zero points and what they give
    layouts: dict[tuple[Any, Any], _Layout] = {}

    def factors(a_s: Any, a_zp: Any, b_s: Any, b_zp: Any, c_s: Any, c_zp: Any) -> tuple[Any, ...]:
        """(ra, rb, za, zb, zc); computed once for constant inputs (the same read-only
        arrays every run)."""
        key = (a_s, a_zp, b_s, b_zp, c_s, c_zp)
        last = kept[0]
        if last is not None and all(u is v for u, v in zip(last[0], key)):
            return last[1]  # type: ignore[no-any-return]
        sa, sb = _scalar(name, "A_scale", a_s), _scalar(name, "B_scale", b_s)
        sc = np.float32(_scalar(name, "C_scale", c_s))
        if mul:
            ra = np.float32(np.float32(sa) * np.float32(sb) / sc)
            rb = np.float32(1)
        else:
            ra, rb = np.float32(np.float32(sa) / sc), np.float32(np.float32(sb) / sc)
        za, zb, zc = (
            int(z) if z is not None else 0
            for z in (
                _scalar(name, "A_zero_point", a_zp, dt),
                _scalar(name, "B_zero_point", b_zp, dt),
                _scalar(name, "C_zero_point", c_zp, dt),
            )
        )
        result = (ra, rb, za, zb, zc)
        if all(v is None or not np.asarray(v).flags.writeable for v in key):
            kept[0] = (key, result)
        return result

    def run(
        a: Array, a_s: Any, a_zp: Any, b: Array, b_s: Any, b_zp: Any, c_s: Any, c_zp: Any = None
    ) -> tuple[Array]:
        if a.dtype != dt or b.dtype != dt:
            raise InvalidArgument(f"{name}: A {a.dtype} and B {b.dtype} must both be {dt}")
        ra, rb, za, zb, zc = factors(a_s, a_zp, b_s, b_zp, c_s, c_zp)
        shapes = (a.shape, b.shape)
        lay = layouts.get(shapes)
        if lay is None:
            lay = layouts[shapes] = _layout(a.shape, b.shape, name)
        fa, fb = _operand(a, lay.how[0], lay), _operand(b, lay.how[1], lay)
        out, rows, (a_step, b_step) = lay.out, lay.rows, lay.steps
        y = np.empty(out, dt)
        if y.size:
            yf = y.reshape(-1)
            kernel(y.size, fa, a_step, fb, b_step, yf, rows, za, zb, ra, rb, zc, lo, hi, mul)
        return (y,)

    return run


def _applies(kn: KernelNode) -> str | None:
    return eight_bit_applies(kn, (0, 3), outputs=True)


def _softmax_applies(kn: KernelNode) -> str | None:
    why = eight_bit_applies(kn, (0,), outputs=True)
    if why or int(kn.attr("opset", 13)) < 13:  # coerced to 2-D: any axis
        return why
    shape = kn.inputs[0].shape
    if shape is None:
        return "input rank unknown at session creation"
    axis = int(kn.attr("axis", -1))
    if len(shape) == 0 or axis not in (-1, len(shape) - 1):
        return f"QLinearSoftmax over axis {axis} of rank {len(shape)}: numba runs the last axis"
    return None


def _build_softmax(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name = kn.name
    dt = np.dtype(kn.inputs[0].dtype)
    lo, hi = int_range(dt)
    coerced = int(kn.attr("opset", 13)) < 13
    axis = int(kn.attr("axis", -1))
    f32 = np.dtype(np.float32)
    sig = types.void(
        numba_array(dt, 2, readonly=True, layout="C"),
        numba_array(f32, 1, readonly=True, layout="C"), types.float32, types.int32,
        types.int32, types.int32, numba_array(dt, 2, readonly=False, layout="C"),
    )  # fmt: skip
    kernel = ctx.jit(_softmax, [sig])
    steps = np.arange(256, dtype=np.float32)

    def run(x: Array, x_s: Any, x_zp: Any, y_s: Any, y_zp: Any = None) -> tuple[Array]:
        if x.ndim == 0:
            raise InvalidArgument(f"{name}: input must have rank >= 1")
        sx = np.float32(_scalar(name, "x_scale", x_s))
        sy = np.float32(_scalar(name, "y_scale", y_s))
        _scalar(name, "x_zero_point", x_zp, dt)
        zy = _scalar(name, "y_zero_point", y_zp, dt)
        # e for each code difference d = row max - x: exp(-d * x_scale)
        table = np.exp(-(steps * sx)).astype(np.float32)
        n = math.prod(x.shape[cut_axis(kn, axis, x.ndim) :]) if coerced else x.shape[-1]
        x2 = np.ascontiguousarray(x).reshape(-1, n) if x.size else x.reshape(0, 1)
        y = np.empty(x2.shape, dt)
        if y.size:
            kernel(y.size * 4, x2, table, sy, 0 if zy is None else int(zy), lo, hi, y)
        return (y.reshape(x.shape),)

    return run


def _build_add(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    return _build(kn, ctx, mul=False)


def _build_mul(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    return _build(kn, ctx, mul=True)


numba_kernel("QLinearAdd", since=1, domain=DOMAIN, applies=_applies)(_build_add)
numba_kernel("QLinearMul", since=1, domain=DOMAIN, applies=_applies)(_build_mul)


def _pool_applies(kn: KernelNode) -> str | None:
    why = eight_bit_applies(kn, (0,), outputs=True)
    if why is None and int(kn.attr("channels_last", 0)):
        why = "QLinearGlobalAveragePool with channels_last: the numpy kernel"
    return why


def _build_pool(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name = kn.name
    dt = np.dtype(kn.inputs[0].dtype)
    lo, hi = int_range(dt)
    sig = types.void(
        numba_array(dt, 2, readonly=True, layout="C"), types.int32, types.float32,
        types.int32, types.int32, types.int32, numba_array(dt, 1, readonly=False, layout="C"),
    )  # fmt: skip
    kernel = ctx.jit(_mean_pool, [sig])

    def run(x: Array, x_s: Any, x_zp: Any, y_s: Any, y_zp: Any = None) -> tuple[Array]:
        if x.ndim < 3:
            raise InvalidArgument(f"{name}: input must be at least 3-D, got {x.shape}")
        size = math.prod(x.shape[2:])
        sx = np.float32(_scalar(name, "x_scale", x_s))
        sy = np.float32(_scalar(name, "y_scale", y_s))
        zx, zy = (
            0 if z is None else int(z)
            for z in (
                _scalar(name, "x_zero_point", x_zp, dt),
                _scalar(name, "y_zero_point", y_zp, dt),
            )
        )
        ratio = np.float32(sx / (sy * np.float32(size)))
        rows = x.shape[0] * x.shape[1]
        y = np.empty(rows, dt)
        if rows and size:
            x2 = np.ascontiguousarray(x).reshape(rows, size)
            kernel(x.size, x2, zx, ratio, zy, lo, hi, y)
        elif rows:
            y[:] = np.clip(zy, lo, hi)
        return (y.reshape(*x.shape[:2], *([1] * (x.ndim - 2))),)

    return run


numba_kernel("QLinearGlobalAveragePool", since=1, domain=DOMAIN, applies=_pool_applies)(_build_pool)
numba_kernel("QLinearSoftmax", since=1, domain=DOMAIN, applies=_softmax_applies)(_build_softmax)
