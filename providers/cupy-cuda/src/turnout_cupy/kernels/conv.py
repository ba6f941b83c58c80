"""Conv as im2col + GEMM, and the pooling ops, on `be.xp`.

Geometry (strides, dilations, pads per auto_pad, output sizes, kernel and channel checks) comes
from `turnout.semantics`, so a malformed node is the same `InvalidArgument` as on every other
provider. Conv gathers each kernel tap's strided window of the padded input into columns
(N, C/g * taps, out pixels) and multiplies by the weights per group with `xp.matmul` (cuBLAS,
batched over images and groups). Pools take the same strided windows and reduce over taps.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout.provider import KernelFn, KernelNode
from turnout.semantics import (
    check_conv_channels,
    conv_geometry,
    conv_kernel_shape,
    pool_kernel_shape,
    spatial_attrs,
)

from ..backend import Backend
from .registry import cuda_kernel, float_only, numeric_only

__all__ = ["im2col_conv", "pool_geometry", "windows"]


def windows(
    xp: Any,
    x: Any,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
) -> Any:
    """The padded input's windows as (N, C, taps, *out): one strided view per kernel tap."""
    taps = []
    for offs in itertools.product(*(range(k) for k in kernel)):
        index = [slice(None), slice(None)]
        for o, d, s, n in zip(offs, dilations, strides, out):
            start = o * d
            index.append(slice(start, start + (n - 1) * s + 1, s))
        taps.append(x[tuple(index)])
    return xp.stack(taps, axis=2)


def _pad(xp: Any, x: Any, begin: Sequence[int], end: Sequence[int], value: float) -> Any:
    if not any(begin) and not any(end):
        return x
    width = [(0, 0), (0, 0), *zip(begin, end)]
    return xp.pad(x, width, mode="constant", constant_values=value)


def _conv_applies(kn: KernelNode) -> str | None:
    return float_only(kn)


def im2col_conv(xp: Any, kn: KernelNode, x: Any, w: Any, group: int) -> Any:
    """Conv node `kn`'s product of `x` and `w` without bias (padding reads 0): im2col
    columns times the weights per group, one batched `xp.matmul`."""
    kernel = conv_kernel_shape(kn, x.shape, w.shape)
    check_conv_channels(kn.name, x.shape, w.shape, group)
    strides, dilations = spatial_attrs(kn, x.ndim - 2, kernel)
    pb, pe, out = conv_geometry(kn, x.shape[2:], kernel, strides, dilations)
    n, m = x.shape[0], w.shape[0]
    cols = windows(xp, _pad(xp, x, pb, pe, 0.0), kernel, strides, dilations, out)
    pixels = int(np.prod(out, dtype=np.int64))
    cols = cols.reshape(n, group, (x.shape[1] // group) * cols.shape[2], pixels)
    wg = w.reshape(group, m // group, -1)
    return xp.matmul(wg, cols).reshape(n, m, *out)


@cuda_kernel("Conv", 11, applies=_conv_applies)
def conv(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    group = int(kn.attr("group", 1))

    def run(x: Any, w: Any, b: Any = None) -> tuple[Any]:
        y = im2col_conv(xp, kn, x, w, group)
        nd, m = x.ndim - 2, w.shape[0]
        if b is not None:
            y += b.reshape((1, m) + (1,) * nd)
        return (y,)

    return run


def pool_geometry(
    kn: KernelNode, x_shape: Sequence[int], ceil_mode: bool
) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int], list[int]]:
    """A pool's (kernel, strides, dilations, pads_begin, pads_end, out, extra): `extra` is the
    end padding a ceil_mode window runs past, beyond pads_end (pad it too, counting nothing)."""
    nd = len(x_shape) - 2
    kernel = pool_kernel_shape(kn, nd)
    strides, dilations = spatial_attrs(kn, nd, kernel)
    pb, pe, out = conv_geometry(kn, x_shape[2:], kernel, strides, dilations, ceil_mode)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    extra = [
        max(0, (o - 1) * s + e - (i + b + p))
        for o, s, e, i, b, p in zip(out, strides, eff, x_shape[2:], pb, pe)
    ]
    return kernel, strides, dilations, pb, pe, out, extra


def _pool_applies(kn: KernelNode) -> str | None:
    if kn.op_type == "MaxPool":  # a max needs no arithmetic: integer inputs too (int8, uint8)
        return numeric_only(kn)
    return float_only(kn)


def _argmax_indices(xp: Any, kn: KernelNode, x: Any, cols: Any, y: Any, geo: Any) -> Any:
    """MaxPool's Indices: the flat index into x (N, C, *spatial; spatial dims column-major
    with storage_order 1) of each window's first tap inside the input that holds its max."""
    kernel, strides, dilations, pb, _, out, extra = geo
    nd = x.ndim - 2
    ends = [p + q for p, q in zip(geo[4], extra)]
    inside = _pad(xp, xp.ones((1, 1, *x.shape[2:]), bool), pb, ends, False)
    hit = (cols == y[:, :, None]) & windows(xp, inside, kernel, strides, dilations, out)
    if x.dtype.kind == "f":  # a NaN max is its window's first NaN
        hit = hit | (xp.isnan(cols) & xp.isnan(y)[:, :, None])
    best = xp.argmax(hit, axis=2).astype(np.int64)  # first True: the first such tap
    sp = x.shape[2:]
    flat = xp.zeros(best.shape, np.int64)
    order = range(nd - 1, -1, -1) if int(kn.attr("storage_order", 0)) else range(nd)
    for a in order:
        tap = (best // int(np.prod(kernel[a + 1 :], dtype=np.int64))) % kernel[a]
        start = xp.arange(out[a], dtype=np.int64) * strides[a] - pb[a]
        coord = start.reshape((-1,) + (1,) * (nd - 1 - a)) + tap * dilations[a]
        flat = flat * sp[a] + coord
    nc = xp.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * nd)
    return flat + nc * int(np.prod(sp, dtype=np.int64))


def _pool(kind: str) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        ceil_mode = bool(kn.attr("ceil_mode", 0))
        include_pad = bool(kn.attr("count_include_pad", 0))
        want_indices = len(kn.node.outputs) > 1 and bool(kn.node.outputs[1])

        def run(x: Any) -> tuple[Any, ...]:
            nd = x.ndim - 2
            geo = pool_geometry(kn, x.shape, ceil_mode)
            kernel, strides, dilations, pb, pe, out, extra = geo
            ends = [p + q for p, q in zip(pe, extra)]
            if kind == "max":
                lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
                cols = windows(xp, _pad(xp, x, pb, ends, lowest), kernel, strides, dilations, out)
                y = xp.max(cols, axis=2)
                if not want_indices:
                    return (y,)
                return (y, _argmax_indices(xp, kn, x, cols, y, geo))
            cols = windows(xp, _pad(xp, x, pb, ends, 0.0), kernel, strides, dilations, out)
            total = xp.sum(cols, axis=2)
            ones = xp.ones((1, 1, *x.shape[2:]), x.dtype)
            if include_pad:  # the declared pads count, the ceil_mode overhang does not
                ones = _pad(xp, ones, pb, pe, 1.0)
                counted = _pad(xp, ones, [0] * nd, extra, 0.0)
            else:
                counted = _pad(xp, ones, pb, ends, 0.0)
            count = xp.sum(windows(xp, counted, kernel, strides, dilations, out), axis=2)
            return ((total / count).astype(x.dtype),)

        return run

    return build


cuda_kernel("MaxPool", 8, applies=_pool_applies)(_pool("max"))
cuda_kernel("AveragePool", 7, applies=_pool_applies)(_pool("average"))


def _global(reduce: str) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        f = getattr(be.xp, reduce)
        return lambda x: (f(x, axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype),)

    return build


cuda_kernel("GlobalAveragePool", 1, applies=float_only)(_global("mean"))
cuda_kernel("GlobalMaxPool", 1, applies=float_only)(_global("max"))
