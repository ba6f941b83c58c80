"""numpy kernels of the quantized element-wise com.microsoft ops that onnxruntime's QOperator
quantizer writes: QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QLinearSoftmax, QLinearWhere.

They compute as onnxruntime's CPU kernels do: in float32 from the dequantized values, rounding
half to even and saturating to the output type once at the end (`quant.quantize`). The unary
ops apply their function to each of the 256 codes once per run and look the input up in that
table, so their result is the one the table gives for any input size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.pool import average_pool
from turnout.providers.cpu.kernels.quant import dequantize, quantize
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.numerics import logistic
from turnout.sdk.semantics.shape import cut_axis

__all__: list[str] = []

Array = np.ndarray[Any, Any]
Fn = Callable[[Array], Array]


def _scalar(node: KernelNode, what: str, value: Array | None) -> Array | None:
    """A per-tensor scale or zero point (onnxruntime takes no other for these ops)."""
    if value is not None and np.size(value) != 1:
        raise InvalidArgument(f"{node.name}: {what} must be a scalar, got shape {value.shape}")
    return None if value is None else np.asarray(value).reshape(())


def _broadcast_error(node: KernelNode, *shapes: tuple[int, ...]) -> InvalidArgument:
    return InvalidArgument(f"{node.name}: input shapes {list(shapes)} do not broadcast")


@cpu_kernel("QLinearAdd", since=1, domain=DOMAIN)
def qlinear_add(node: KernelNode) -> KernelFn:
    """C = A + B on dequantized values, requantized: each side scaled by its scale / C_scale."""

    def run(
        a: Array,
        a_scale: Array,
        a_zp: Array | None,
        b: Array,
        b_scale: Array,
        b_zp: Array | None,
        c_scale: Array,
        c_zp: Array | None = None,
    ) -> tuple[Array]:
        sc = np.float32(_scalar(node, "C_scale", c_scale))
        ra = np.float32(_scalar(node, "A_scale", a_scale)) / sc
        rb = np.float32(_scalar(node, "B_scale", b_scale)) / sc
        try:
            y = dequantize(a, ra, _scalar(node, "A_zero_point", a_zp)) + dequantize(
                b, rb, _scalar(node, "B_zero_point", b_zp)
            )
        except ValueError:
            raise _broadcast_error(node, a.shape, b.shape) from None
        return (quantize(y, 1, _scalar(node, "C_zero_point", c_zp), a.dtype),)

    return run


@cpu_kernel("QLinearMul", since=1, domain=DOMAIN)
def qlinear_mul(node: KernelNode) -> KernelFn:
    """C = A * B: the zero-point-free products times A_scale * B_scale / C_scale."""

    def run(
        a: Array,
        a_scale: Array,
        a_zp: Array | None,
        b: Array,
        b_scale: Array,
        b_zp: Array | None,
        c_scale: Array,
        c_zp: Array | None = None,
    ) -> tuple[Array]:
        ratio = (
            np.float32(_scalar(node, "A_scale", a_scale))
            * np.float32(_scalar(node, "B_scale", b_scale))
            / np.float32(_scalar(node, "C_scale", c_scale))
        )
        try:
            prod = dequantize(a, 1, _scalar(node, "A_zero_point", a_zp)) * dequantize(
                b, 1, _scalar(node, "B_zero_point", b_zp)
            )
        except ValueError:
            raise _broadcast_error(node, a.shape, b.shape) from None
        return (quantize(prod * ratio, 1, _scalar(node, "C_zero_point", c_zp), a.dtype),)

    return run


def _codes(dt: np.dtype[Any]) -> Array:
    """Every value of an 8-bit type, at the index of its byte."""
    return np.arange(256, dtype=np.uint8).view(dt)


def _table_op(fn: Fn) -> KernelFn:
    """A unary quantized op: `fn` over the 256 dequantized codes, requantized, looked up."""

    def run(
        x: Array, x_scale: Array, x_zp: Array | None, y_scale: Array, y_zp: Array | None = None
    ) -> tuple[Array]:
        table = quantize(fn(dequantize(_codes(x.dtype), x_scale, x_zp)), y_scale, y_zp, x.dtype)
        return (table[x.view(np.uint8)],)

    return run


@cpu_kernel("QLinearSigmoid", since=1, domain=DOMAIN)
def qlinear_sigmoid(node: KernelNode) -> KernelFn:
    return _table_op(logistic)


@cpu_kernel("QLinearLeakyRelu", since=1, domain=DOMAIN)
def qlinear_leaky_relu(node: KernelNode) -> KernelFn:
    alpha = np.float32(node.attr("alpha", 0.01))
    return _table_op(lambda v: np.where(v >= 0, v, v * alpha))


def _to_channels_first(x: Array) -> Array:
    return np.moveaxis(x, -1, 1)


def _to_channels_last(x: Array) -> Array:
    return np.moveaxis(x, 1, -1)


@cpu_kernel("QLinearGlobalAveragePool", since=1, domain=DOMAIN)
def qlinear_global_average_pool(node: KernelNode) -> KernelFn:
    """The integer sum of each channel's image less its zero points, times
    x_scale / (y_scale * image size), requantized."""
    last = bool(node.attr("channels_last", 0))

    def run(x: Array, x_scale: Array, x_zp: Array, y_scale: Array, y_zp: Array) -> tuple[Array]:
        if x.ndim < 3:
            raise InvalidArgument(f"{node.name}: input must be at least 3-D, got {x.shape}")
        axes = tuple(range(1, x.ndim - 1)) if last else tuple(range(2, x.ndim))
        size = int(np.prod([x.shape[a] for a in axes]))
        zp = _scalar(node, "x_zero_point", x_zp)
        acc = x.astype(np.int64).sum(axis=axes, keepdims=True)
        if zp is not None:
            acc -= int(zp) * size
        ratio = np.float32(_scalar(node, "x_scale", x_scale)) / (
            np.float32(_scalar(node, "y_scale", y_scale)) * np.float32(size)
        )
        y = acc.astype(np.float32) * ratio
        return (quantize(y, 1, _scalar(node, "y_zero_point", y_zp), x.dtype),)

    return run


@cpu_kernel("QLinearAveragePool", since=1, domain=DOMAIN)
def qlinear_average_pool(node: KernelNode) -> KernelFn:
    """AveragePool of the dequantized input (padding counts as zero), requantized."""
    pool = average_pool(node)
    last = bool(node.attr("channels_last", 0))

    def run(
        x: Array, x_scale: Array, x_zp: Array | None, y_scale: Array, y_zp: Array | None = None
    ) -> tuple[Array]:
        xf = dequantize(x, _scalar(node, "x_scale", x_scale), _scalar(node, "x_zero_point", x_zp))
        (y,) = pool(_to_channels_first(xf) if last else xf)
        y = _to_channels_last(y) if last else y
        return (quantize(y, _scalar(node, "y_scale", y_scale), y_zp, x.dtype),)

    return run


@cpu_kernel("QLinearConcat", since=1, domain=DOMAIN)
def qlinear_concat(node: KernelNode) -> KernelFn:
    """Each (tensor, scale, zero point) triple requantized to Y's parameters, concatenated."""
    axis = int(node.attr("axis"))

    def run(y_scale: Array, y_zp: Array, *parts: Array) -> tuple[Array]:
        if not parts or len(parts) % 3:
            raise InvalidArgument(
                f"{node.name}: inputs after Y_scale and Y_zero_point must be (tensor, scale, "
                f"zero point) triples, got {len(parts)} inputs"
            )
        dt = np.asarray(y_zp).dtype
        out = []
        for x, s, zp in zip(parts[0::3], parts[1::3], parts[2::3]):
            if x.dtype != dt:
                raise InvalidArgument(f"{node.name}: input of type {x.dtype}, Y is {dt}")
            same = np.array_equal(s, y_scale) and np.array_equal(zp, y_zp)
            out.append(x if same else quantize(dequantize(x, s, zp), y_scale, y_zp, dt))
        try:
            return (np.concatenate(out, axis=axis),)
        except (ValueError, np.exceptions.AxisError) as e:
            raise InvalidArgument(f"{node.name}: cannot concatenate on axis {axis}: {e}") from None

    return run


@cpu_kernel("QLinearSoftmax", since=1, domain=DOMAIN)
def qlinear_softmax(node: KernelNode) -> KernelFn:
    """Softmax of the dequantized input, requantized: along `axis` from opset 13, over the
    axes from `axis` on (the input coerced to 2-D) before."""
    axis = int(node.attr("axis", -1))
    coerced = int(node.attr("opset")) < 13

    def run(
        x: Array, x_scale: Array, x_zp: Array | None, y_scale: Array, y_zp: Array
    ) -> tuple[Array]:
        xf = dequantize(x, x_scale, x_zp)
        if coerced:
            lead = x.shape[: cut_axis(node, axis, x.ndim)] if x.ndim else ()
            xf = xf.reshape(int(np.prod(lead)), -1)
        e = np.exp(xf - xf.max(axis=-1 if coerced else axis, keepdims=True))
        y = e / e.sum(axis=-1 if coerced else axis, keepdims=True)
        return (quantize(y.reshape(x.shape), y_scale, y_zp, x.dtype),)

    return run


@cpu_kernel("QLinearWhere", since=1, domain=DOMAIN)
def qlinear_where(node: KernelNode) -> KernelFn:
    """X where condition else Y, each requantized to Z's parameters."""

    def run(
        cond: Array,
        x: Array,
        x_scale: Array,
        x_zp: Array,
        y: Array,
        y_scale: Array,
        y_zp: Array,
        z_scale: Array,
        z_zp: Array,
    ) -> tuple[Array]:
        qx = quantize(dequantize(x, x_scale, x_zp), z_scale, z_zp, x.dtype)
        qy = quantize(dequantize(y, y_scale, y_zp), z_scale, z_zp, x.dtype)
        try:
            return (np.where(cond, qx, qy),)
        except ValueError:
            raise _broadcast_error(node, cond.shape, x.shape, y.shape) from None

    return run


@cpu_kernel("QLinearReduceMean", since=1, domain=DOMAIN)
def qlinear_reduce_mean(node: KernelNode) -> KernelFn:
    """ReduceMean of the dequantized data in float32, requantized."""
    axes = node.attr("axes")
    keep = bool(node.attr("keepdims", 1))

    def run(
        x: Array, x_scale: Array, x_zp: Array | None, y_scale: Array, y_zp: Array | None = None
    ) -> tuple[Array]:
        xf = dequantize(x, _scalar(node, "data_scale", x_scale), _scalar(node, "zero point", x_zp))
        try:
            axis = tuple(int(a) for a in axes) if axes else None
            y = xf.mean(axis=axis, keepdims=keep, dtype=np.float32)
        except (ValueError, np.exceptions.AxisError) as e:
            raise InvalidArgument(f"{node.name}: axes {axes} for shape {x.shape}: {e}") from None
        return (quantize(y, _scalar(node, "reduced_scale", y_scale), y_zp, x.dtype),)

    return run


@cpu_kernel("MulInteger", since=1, domain=DOMAIN)
def mul_integer(node: KernelNode) -> KernelFn:
    """(A - A_zero_point) * (B - B_zero_point) as int32."""

    def run(a: Array, a_zp: Array | None, b: Array, b_zp: Array | None = None) -> tuple[Array]:
        try:
            return (
                dequantize(a, 1, a_zp).astype(np.int32) * dequantize(b, 1, b_zp).astype(np.int32),
            )
        except ValueError:
            raise _broadcast_error(node, a.shape, b.shape) from None

    return run
