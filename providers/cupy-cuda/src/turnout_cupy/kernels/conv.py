"""Conv as im2col + GEMM, and the pooling ops, on `be.xp`.

Geometry (strides, dilations, pads per auto_pad, output sizes, kernel and channel checks) comes
from `turnout.sdk.semantics`, so a malformed node is the same `InvalidArgument` as on every other
provider. Conv gathers each kernel tap's strided window of the padded input into columns
(N, C/g * taps, out pixels) and multiplies by the weights per group with `xp.matmul` (cuBLAS,
batched over images and groups). Pools take the same strided windows and reduce over taps.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import (
    check_conv_channels,
    conv_geometry,
    conv_kernel_shape,
    pool_kernel_shape,
    spatial_attrs,
)
from turnout.sdk.semantics.deform_conv import deform_conv_plan

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
    best = xp.argmax(hit.view(np.uint8), axis=2).astype(np.int64)  # first 1: the first such tap
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


def _shape(v: Any) -> Any:
    return None if v is None else v.shape


def _deform_applies(kn: KernelNode) -> str | None:
    x = kn.inputs[0] if kn.inputs else None
    if x is not None and x.shape is not None and len(x.shape) != 4:
        return "DeformConv runs on 2-D images (4-D input) here"
    return float_only(kn)


@cuda_kernel("DeformConv", 19, applies=_deform_applies)
def deform_conv(kn: KernelNode, be: Backend) -> KernelFn:
    """Each kernel tap's samples (bilinear at the tap's position plus its offset, the four
    neighbours gathered with `take_along_axis`, those outside the image weighted 0, times the
    mask) form the im2col columns (N, C * taps, pixels), which one batched matmul per group
    multiplies by the weights, as Conv does; geometry from `turnout.sdk.semantics.deform_conv`."""
    xp = be.xp

    def run(x: Any, w: Any, offset: Any, bias: Any = None, mask: Any = None) -> tuple[Any]:
        p = deform_conv_plan(kn, x.shape, w.shape, offset.shape, _shape(bias), _shape(mask))
        n, c, h, wd = x.shape
        (kh, kw), (oh, ow), og = p.kernel, p.out, p.offset_group
        taps, pixels = kh * kw, oh * ow
        off = offset.reshape(n, og, taps, 2, pixels).astype(x.dtype, copy=False)
        ty, tx = (a.reshape(-1) for a in xp.meshgrid(xp.arange(kh), xp.arange(kw), indexing="ij"))
        oy, ox = (a.reshape(-1) for a in xp.meshgrid(xp.arange(oh), xp.arange(ow), indexing="ij"))
        # sample positions (n, og, taps, pixels)
        py = (oy * p.strides[0] - p.pads_begin[0])[None, :] + (ty * p.dilations[0])[:, None]
        px = (ox * p.strides[1] - p.pads_begin[1])[None, :] + (tx * p.dilations[1])[:, None]
        py, px = py + off[:, :, :, 0], px + off[:, :, :, 1]
        y0, x0 = xp.floor(py), xp.floor(px)
        fy, fx = py - y0, px - x0
        flat = x.reshape(n, og, c // og, h * wd)
        cols = xp.zeros((n, og, c // og, taps * pixels), x.dtype)
        for dy, dx, wt in ((0, 0, (1 - fy) * (1 - fx)), (0, 1, (1 - fy) * fx),
                           (1, 0, fy * (1 - fx)), (1, 1, fy * fx)):  # fmt: skip
            yy, xx = y0 + dy, x0 + dx
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < wd)
            idx = (xp.clip(yy, 0, h - 1) * wd + xp.clip(xx, 0, wd - 1)).astype(np.int64)
            wt = xp.where(inside, wt, 0).reshape(n, og, 1, -1)
            got = xp.take_along_axis(
                flat, xp.broadcast_to(idx.reshape(n, og, 1, -1), cols.shape), 3
            )
            cols = cols + wt * got
        if mask is not None:
            cols = cols * mask.reshape(n, og, 1, taps * pixels).astype(x.dtype, copy=False)
        g = p.group
        cols = cols.reshape(n, g, (c // g) * taps, pixels)  # channels of a group, then taps
        wg = w.reshape(g, w.shape[0] // g, (c // g) * taps)
        y = xp.matmul(wg[None], cols).reshape(n, w.shape[0], oh, ow)
        if bias is not None:
            y = y + bias.reshape(1, -1, 1, 1)
        return (y.astype(x.dtype, copy=False),)

    return run
