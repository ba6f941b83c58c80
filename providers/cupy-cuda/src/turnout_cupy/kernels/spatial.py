"""Sampling and transposed-window ops on `be.xp`: GridSample, AffineGrid, RoiAlign,
ConvTranspose, Col2Im.

GridSample's taps (indices, weights, zero-padding masks) come from `turnout.sdk.semantics.sampling`
computed on the device from the grid, and each combination of per-axis taps is one gather of the
channels-last input. RoiAlign reads its ROIs and batch indices on the host (the number of samples
per bin depends on each ROI's size), places the samples there, and gathers and pools on the
device, one ROI at a time. AffineGrid's base grid depends only on the (host) size input.
ConvTranspose is one batched GEMM per group (cuBLAS through `xp.matmul`) into per-tap columns,
then a strided scatter-add of each tap into the output (col2im); Col2Im is that scatter-add alone.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.sampling import (
    affine_grid_base,
    check_affine_theta,
    check_grid,
    check_roi_align,
    grid_axis_taps,
    grid_sample_attrs,
    roi_align_attrs,
    roi_samples,
)
from turnout.sdk.semantics.unfold import (
    TapPlacement,
    col2im_geometry,
    conv_transpose_geometry,
    tap_placements,
)

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []


def _wide(dt: Any) -> Any:
    """The float type sampling arithmetic runs in: float16 widened to float32."""
    return np.promote_types(dt, np.float32)


@cuda_kernel("GridSample", 16, applies=float_only)
def grid_sample(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    attrs = grid_sample_attrs(kn)

    def run(x: Any, grid: Any) -> tuple[Any]:
        check_grid(kn, x.shape, grid.shape)
        r = x.ndim - 2
        n = x.shape[0]
        ct = _wide(x.dtype)
        g = grid.astype(ct, copy=False)
        # grid's last axis lists (x, y, z): the reverse of the spatial axes
        taps = [grid_axis_taps(xp, g[..., r - 1 - a], d, attrs) for a, d in enumerate(x.shape[2:])]
        xt = xp.moveaxis(x.astype(ct, copy=False), 1, -1)  # N, *in, C
        bidx = xp.arange(n).reshape((n,) + (1,) * r)
        y = xp.zeros((n, *grid.shape[1:-1], x.shape[1]), ct)
        for combo in itertools.product(*taps):
            w = functools.reduce(lambda a, b: a * b, [t.weight for t in combo])
            masks = [t.inside for t in combo if t.inside is not None]
            if masks:  # a tap in the zero padding contributes 0, whatever it read
                w = xp.where(functools.reduce(xp.logical_and, masks), w, 0)
            key = (bidx, *(t.index for t in combo))
            y = y + xt[key] * w[..., None]
        return (xp.moveaxis(y, -1, 1).astype(x.dtype),)

    return run


@cuda_kernel("AffineGrid", 20, applies=float_only, host_inputs=(1,))
def affine_grid(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    align = bool(kn.attr("align_corners", 0))

    def run(theta: Any, size: Any) -> tuple[Any]:
        sz = [int(v) for v in np.asarray(size).reshape(-1)]
        r = check_affine_theta(kn, theta.shape, sz)
        ct = _wide(theta.dtype)
        base = be.asarray(affine_grid_base(sz[2:], align), ct)
        out = xp.matmul(base, xp.swapaxes(theta.astype(ct, copy=False), 1, 2))  # N, P, r
        return (out.reshape([sz[0], *sz[2:], r]).astype(theta.dtype),)

    return run


@cuda_kernel("RoiAlign", 10, applies=float_only, host_inputs=(1, 2))
def roi_align(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    attrs = roi_align_attrs(kn)

    def one(img: Any, roi: Any) -> Any:
        """One ROI's (C, out_h, out_w) from one image (C, H, W)."""
        sy, sx = roi_samples(attrs, roi, img.shape[1], img.shape[2])
        iy = np.stack([sy.low, sy.low, sy.high, sy.high])[:, :, None]  # corners, y, 1
        ix = np.stack([sx.low, sx.high, sx.low, sx.high])[:, None, :]  # corners, 1, x
        wy = np.stack([1 - sy.weight_high] * 2 + [sy.weight_high] * 2)[:, :, None]
        wx = np.stack([1 - sx.weight_high, sx.weight_high] * 2)[:, None, :]
        keep = sy.valid[:, None] & sx.valid[None, :]
        w = be.asarray(wy * wx * keep, img.dtype)  # corners, y samples, x samples
        v = img[:, be.asarray(iy), be.asarray(ix)] * w  # C, corners, y, x
        bins = (img.shape[0], attrs.out_h, sy.per_bin, attrs.out_w, sx.per_bin)
        if attrs.mode == "max":  # onnxruntime's max: of the weighted corners, then the bin
            return v.max(axis=1).reshape(bins).max(axis=(2, 4))
        return v.sum(axis=1).reshape(bins).mean(axis=(2, 4))

    def run(x: Any, rois: Any, batch_indices: Any) -> tuple[Any]:
        check_roi_align(kn, x.shape, rois.shape, batch_indices.shape)
        n = x.shape[0]
        bi = np.asarray(batch_indices).astype(np.int64)
        if bi.size and (bi.min() < 0 or bi.max() >= n):
            raise InvalidArgument(
                f"RoiAlign node {kn.name!r}: a batch index in {kn.inputs[2].name!r} is out of "
                f"range [0, {n - 1}]"
            )
        xf = x.astype(_wide(x.dtype), copy=False)
        y = xp.zeros((len(bi), x.shape[1], attrs.out_h, attrs.out_w), xf.dtype)
        for r, b in enumerate(bi):
            y[r] = one(xf[int(b)], np.asarray(rois)[r])
        return (y.astype(x.dtype, copy=False),)

    return run


def _fold(xp: Any, cols: Any, placements: list[TapPlacement], out: Sequence[int]) -> Any:
    """col2im: add each kernel tap's columns (N, C, taps, *blocks) into a zero (N, C, *out)
    output where `tap_placements` puts them (strided slices: no position twice per tap)."""
    y = xp.zeros((*cols.shape[:2], *out), cols.dtype)
    for _, src, dst in placements:
        y[dst] += cols[src]
    return y


@cuda_kernel("ConvTranspose", 1, applies=float_only)
def conv_transpose(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    group = int(kn.attr("group", 1))

    def run(x: Any, w: Any, b: Any = None) -> tuple[Any]:
        geo = conv_transpose_geometry(kn, x.shape, w.shape, group, None if b is None else b.shape)
        n, c = x.shape[:2]
        mg = w.shape[1]
        taps = int(np.prod(geo.kernel, dtype=np.int64))
        pixels = int(np.prod(x.shape[2:], dtype=np.int64))
        xg = x.reshape(n, group, c // group, pixels)
        wg = xp.swapaxes(w.reshape(group, c // group, mg * taps), 1, 2)
        cols = xp.matmul(wg, xg).reshape(n, group * mg, taps, *x.shape[2:])
        where = tap_placements(
            geo.kernel, geo.strides, geo.dilations, geo.pads_begin, x.shape[2:], geo.out
        )
        y = _fold(xp, cols, where, geo.out)
        if b is not None:
            y += b.reshape((1, -1) + (1,) * (x.ndim - 2))
        return (y.astype(x.dtype, copy=False),)

    return run


@cuda_kernel("Col2Im", 18, host_inputs=(1, 2))
def col2im(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp

    def run(x: Any, image_shape: Any, block_shape: Any) -> tuple[Any]:
        geo = col2im_geometry(kn, x.shape, np.asarray(image_shape), np.asarray(block_shape))
        cols = x.reshape(x.shape[0], geo.channels, -1, *geo.blocks)
        zero = [0] * len(geo.image)  # fold into the padded image, then crop its pads
        where = tap_placements(geo.kernel, geo.strides, geo.dilations, zero, geo.blocks, geo.padded)
        y = _fold(xp, cols, where, geo.padded)
        crop: tuple[Any, ...] = (
            Ellipsis,
            *(slice(p, p + i) for p, i in zip(geo.pads_begin, geo.image)),
        )
        return (y[crop],)

    return run
