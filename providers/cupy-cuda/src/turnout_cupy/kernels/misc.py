"""Normalizations, linear algebra and small ops on `be.xp`: LpNormalization,
MeanVarianceNormalization, LRN, LpPool, MaxUnpool, Einsum, Det, ReverseSequence, Swish, SwiGLU,
and the cosine windows (Hann, Hamming, Blackman).

Attributes and shape checks come from `turnout.sdk.semantics` (normalization, linalg, unfold,
indexing, geometry); the arithmetic is array expressions on the device, widened from float16
to float32 where a sum is taken. Indices read from device data (MaxUnpool's, ReverseSequence's
lengths) are checked on the device with a flag naming the node, as Gather's are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.dtypes import np_dtype
from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.indexing import reverse_sequence_axes
from turnout.sdk.semantics.linalg import check_square, einsum_equation
from turnout.sdk.semantics.normalization import MVN_EPSILON, lp_norm_attrs, lrn_window, mvn_axes
from turnout.sdk.semantics.unfold import max_unpool_shapes
from turnout.sdk.semantics.windows import COSINE_WINDOWS, window_period

from ..backend import Backend
from .conv import pool_geometry, windows
from .elementwise import ACTIVATIONS
from .registry import cuda_kernel, float_only, numeric_only

__all__: list[str] = []


def _wide(x: Any) -> Any:
    """x in the float type sums run in: float16 widened to float32, wider types kept."""
    return x.astype(np.promote_types(x.dtype, np.float32), copy=False)


@cuda_kernel("LpNormalization", 1, applies=float_only)
def lp_normalization(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp

    def run(x: Any) -> tuple[Any]:
        p, axis = lp_norm_attrs(kn, x.ndim)
        xf = _wide(x)
        if p == 1:
            norm = xp.abs(xf).sum(axis=axis, keepdims=True)
        else:
            norm = xp.sqrt((xf * xf).sum(axis=axis, keepdims=True))
        y = xp.where(norm == 0, 0, xf / xp.where(norm == 0, 1, norm))
        return (y.astype(x.dtype),)

    return run


@cuda_kernel("MeanVarianceNormalization", 9, applies=float_only)
def mean_variance_normalization(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp

    def run(x: Any) -> tuple[Any]:
        axes = mvn_axes(kn, x.ndim)
        xf = _wide(x)
        mean = xf.mean(axis=axes, keepdims=True)
        var = (xf * xf).mean(axis=axes, keepdims=True) - mean * mean
        return (((xf - mean) / (xp.sqrt(var) + MVN_EPSILON)).astype(x.dtype),)

    return run


@cuda_kernel("LRN", 1, applies=float_only)
def lrn(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp

    def run(x: Any) -> tuple[Any]:
        size, before, after, alpha, beta, bias = lrn_window(kn, x.ndim)
        xf = _wide(x)
        c = x.shape[1]
        # a running sum over the channel axis: window c = cum[c + size] - cum[c]
        sq = xp.pad(xf * xf, [(0, 0), (before + 1, after)] + [(0, 0)] * (x.ndim - 2))
        cum = xp.cumsum(sq, axis=1)
        window = cum[:, size : size + c] - cum[:, 0:c]
        return ((xf / (bias + (alpha / size) * window) ** beta).astype(x.dtype),)

    return run


@cuda_kernel("LpPool", 2, applies=float_only)
def lp_pool(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    p = float(kn.attr("p", 2.0))
    ceil_mode = bool(kn.attr("ceil_mode", 0))

    def run(x: Any) -> tuple[Any]:
        kernel, strides, dilations, pb, pe, out, extra = pool_geometry(kn, x.shape, ceil_mode)
        ends = [e + q for e, q in zip(pe, extra)]  # zero padding adds nothing to the sum
        powered = xp.abs(_wide(x)) ** p
        padded = xp.pad(powered, [(0, 0), (0, 0), *zip(pb, ends)])
        total = xp.sum(windows(xp, padded, kernel, strides, dilations, out), axis=2)
        return ((total ** (1.0 / p)).astype(x.dtype),)

    return run


@cuda_kernel("MaxUnpool", 9, applies=numeric_only, host_inputs=(2,))
def max_unpool(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp

    def run(x: Any, idx: Any, output_shape: Any = None) -> tuple[Any]:
        shape_in = None if output_shape is None else np.asarray(output_shape)
        inferred, shape = max_unpool_shapes(kn, x.shape, idx.shape, shape_in)
        size = int(np.prod(inferred, dtype=np.int64))
        flat = idx.reshape(-1).astype(np.int64)
        if flat.size:
            be.checks.flag(
                xp.any((flat < 0) | (flat >= size)),
                f"MaxUnpool node {kn.name!r}: an index in {kn.inputs[1].name!r} is out of "
                f"range [0, {size - 1}] for output {inferred} (checked on the device)",
            )
        y = xp.zeros(size, x.dtype)
        y[xp.clip(flat, 0, max(size - 1, 0))] = x.reshape(-1)
        y = y.reshape(inferred)
        if shape == inferred:
            return (y,)
        # a larger output_shape extends each axis with zeros at its end
        res = xp.zeros(shape, x.dtype)
        res[tuple(slice(0, i) for i in inferred)] = y
        return (res,)

    return run


@cuda_kernel("Einsum", 12)
def einsum(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    equation = einsum_equation(kn)

    def run(*xs: Any) -> tuple[Any]:
        dt = xs[0].dtype
        wide = [_wide(x) if dt.kind == "f" else x for x in xs]
        return (xp.asarray(xp.einsum(equation, *wide)).astype(dt, copy=False),)

    return run


@cuda_kernel("Det", 11, applies=float_only)
def det(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp

    def run(x: Any) -> tuple[Any]:
        check_square(kn, x.shape)
        wide = x.astype(np.promote_types(x.dtype, np.float64), copy=False)
        return (xp.asarray(xp.linalg.det(wide)).astype(x.dtype),)

    return run


@cuda_kernel("ReverseSequence", 10)
def reverse_sequence(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp

    def run(x: Any, lens: Any) -> tuple[Any]:
        time_axis, batch_axis = reverse_sequence_axes(kn, x.shape, lens.shape)
        steps, batch = x.shape[time_axis], x.shape[batch_axis]
        n = lens.astype(np.int64)
        if n.size:
            be.checks.flag(
                xp.any((n < 0) | (n > steps)),
                f"ReverseSequence node {kn.name!r}: a length in {kn.inputs[1].name!r} is out "
                f"of range [0, {steps}] (checked on the device)",
            )
        n = xp.clip(n, 0, steps)
        t = xp.arange(steps)[:, None]
        src = xp.where(t < n[None, :], n[None, :] - 1 - t, t)  # (time, batch)
        m = xp.moveaxis(x, (time_axis, batch_axis), (0, 1))
        out = m[src, xp.arange(batch)[None, :]]
        return (xp.ascontiguousarray(xp.moveaxis(out, (0, 1), (time_axis, batch_axis))),)

    return run


@cuda_kernel("Swish", 24, applies=float_only)
def swish(kn: KernelNode, be: Backend) -> KernelFn:
    sigmoid = ACTIVATIONS["Sigmoid"][1](be, kn)
    alpha = float(kn.attr("alpha", 1.0))
    return lambda x: ((x * sigmoid(x * x.dtype.type(alpha))).astype(x.dtype),)


@cuda_kernel("SwiGLU", 28, applies=float_only)
def swiglu(kn: KernelNode, be: Backend) -> KernelFn:
    gate = swish(kn, be)

    def run(a: Any, b: Any) -> tuple[Any]:
        if a.shape != b.shape:
            raise InvalidArgument(
                f"SwiGLU node {kn.name!r}: A {tuple(a.shape)} and B {tuple(b.shape)} must have "
                "the same shape (no broadcasting)"
            )
        return ((gate(a)[0] * b).astype(a.dtype),)

    return run


def _window(op: str) -> Any:
    a0, a1, a2 = COSINE_WINDOWS[op]

    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        dtype = np_dtype(int(kn.attr("output_datatype", 1)))

        def run(size: Any) -> tuple[Any]:
            n = int(np.asarray(size).reshape(()))
            period = window_period(kn, n)
            step = 2 * np.pi / period if period > 0 else 0.0  # a 1-point symmetric window: a0-a1+a2
            phase = xp.arange(n, dtype=np.float64) * step
            y = a0 - a1 * xp.cos(phase) + a2 * xp.cos(2 * phase)
            return (y.astype(dtype),)

        return run

    return build


for _op in COSINE_WINDOWS:
    cuda_kernel(_op, 17, host_inputs=(0,))(_window(_op))
