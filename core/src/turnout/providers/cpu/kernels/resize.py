"""Resampling kernels: Resize, Upsample, GridSample, AffineGrid, Col2Im.

Resize is separable: each resized axis gets a small (out, taps) table of source indices and
weights (nearest: one tap; linear: 2; cubic: 4; antialias widens the filter by 1/scale), and
the data is gathered and weighted along that axis in one numpy step per axis. GridSample
gathers each interpolation corner for all output points at once.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import attr_text
from turnout.providers.cpu.kernels.conv import compute_dtype
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.resize import (
    extrapolation_fill,
    filter_taps,
    nearest_indices,
    outside_roi,
    resize_attr_error,
    resize_targets,
    source_coordinates,
)
from turnout.sdk.semantics.sampling import (
    affine_grid_base,
    check_affine_theta,
    check_grid,
    grid_axis_taps,
    grid_sample_attrs,
)
from turnout.sdk.semantics.unfold import col2im_geometry, tap_placements

__all__: list[str] = []


class _Resampler:
    """Resize's attributes, decoded once; `__call__` resizes given scales or sizes per axis."""

    def __init__(self, node: KernelNode, mode: str, coord: str, nearest: str) -> None:
        self.name = node.name
        self.mode = mode
        self.coord = coord
        self.nearest = nearest
        self.cubic_a = float(node.attr("cubic_coeff_a", -0.75))
        self.exclude_outside = bool(node.attr("exclude_outside", 0))
        self.extrapolation = float(node.attr("extrapolation_value", 0.0))
        self.antialias = bool(node.attr("antialias", 0))
        self.policy = node.attr("keep_aspect_ratio_policy", "stretch")
        axes = node.attr("axes", None)
        self.axes = None if axes is None else [int(a) for a in axes]
        error = resize_attr_error(mode, coord, nearest, self.policy)
        if error is not None:
            raise InvalidArgument(f"{self.name}: {error}")

    def __call__(
        self,
        x: np.ndarray,
        roi: np.ndarray | None,
        scales: np.ndarray | None,
        sizes: np.ndarray | None,
    ) -> np.ndarray:
        axes, sc, sz, rois = resize_targets(
            self.name, self.axes, self.policy, self.coord, x.shape, roi, scales, sizes
        )
        out = x
        fill = extrapolation_fill(self.extrapolation, x.dtype)
        if self.mode == "nearest":
            for a, s, o, rr in zip(axes, sc, sz, rois):
                out = self._nearest_axis(out, a, s, o, rr, fill)
            return out
        ct = np.dtype(np.float64) if x.dtype.kind in "iu" else compute_dtype(x.dtype)
        out = x.astype(ct)
        for a, s, o, rr in zip(axes, sc, sz, rois):
            out = self._filter_axis(out, a, s, o, rr, fill)
        if x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            r = np.rint(out)
            # float(info.max) of a 64-bit type rounds up to 2**63 or 2**64, which does not cast:
            # clip below it and saturate explicitly
            hi = np.nextafter(float(info.max), 0.0) if x.dtype.itemsize == 8 else info.max
            y = np.clip(r, info.min, hi).astype(x.dtype)
            return np.where(r >= float(info.max), x.dtype.type(info.max), y)
        return out.astype(x.dtype)

    def _nearest_axis(
        self,
        x: np.ndarray,
        axis: int,
        scale: float,
        out_len: int,
        roi: tuple[float, float] | None,
        fill: float | int,
    ) -> np.ndarray:
        n = x.shape[axis]
        if n == out_len and scale == 1.0 and roi is None:
            return x
        src = source_coordinates(self.coord, out_len, n, scale, roi)
        y = np.take(x, nearest_indices(src, self.nearest, scale, n), axis=axis)
        if roi is not None:
            y = self._extrapolate(y, axis, src, n, fill)
        return y

    def _extrapolate(
        self, y: np.ndarray, axis: int, src: np.ndarray, n: int, fill: float | int
    ) -> np.ndarray:
        outside = outside_roi(src, n)
        if not outside.any():
            return y
        shape = [1] * y.ndim
        shape[axis] = -1
        return np.where(outside.reshape(shape), y.dtype.type(fill), y)

    def _filter_axis(
        self,
        x: np.ndarray,
        axis: int,
        scale: float,
        out_len: int,
        roi: tuple[float, float] | None,
        fill: float | int,
    ) -> np.ndarray:
        n = x.shape[axis]
        if n == out_len and scale == 1.0 and roi is None:
            return x
        src = source_coordinates(self.coord, out_len, n, scale, roi)
        idx, w = filter_taps(
            src, n, self.mode, scale, self.cubic_a, self.antialias, self.exclude_outside
        )
        shape = [1] * x.ndim
        shape[axis] = out_len
        w = w.astype(x.dtype)
        y = np.take(x, idx[:, 0], axis=axis) * w[:, 0].reshape(shape)
        for t in range(1, idx.shape[1]):
            y += np.take(x, idx[:, t], axis=axis) * w[:, t].reshape(shape)
        if roi is not None:
            y = self._extrapolate(y, axis, src, n, fill)
        return y


@cpu_kernel("Resize", since=10)
def resize(node: KernelNode) -> KernelFn:
    mode = attr_text(node.attr("mode"), "nearest")
    if node.since_version < 11:
        rs = _Resampler(node, mode, "asymmetric", "simple")

        def run10(x: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray]:
            return (rs(x, None, scales, None),)

        return run10
    coord = attr_text(node.attr("coordinate_transformation_mode"), "half_pixel")
    rs = _Resampler(node, mode, coord, attr_text(node.attr("nearest_mode"), "round_prefer_floor"))

    def run(
        x: np.ndarray,
        roi: np.ndarray | None = None,
        scales: np.ndarray | None = None,
        sizes: np.ndarray | None = None,
    ) -> tuple[np.ndarray]:
        return (rs(x, roi, scales, sizes),)

    return run


@cpu_kernel("Upsample", since=7)
def upsample(node: KernelNode) -> KernelFn:
    mode = attr_text(node.attr("mode"), "nearest")
    if mode == "bilinear":
        mode = "linear"
    rs = _Resampler(node, mode, "asymmetric", "simple")
    scales_attr = node.attr("scales", None)

    def run(x: np.ndarray, scales: np.ndarray | None = None) -> tuple[np.ndarray]:
        s = np.asarray(scales if scales is not None else scales_attr, np.float32)
        if s.size != x.ndim:
            raise InvalidArgument(f"{node.name}: scales must have {x.ndim} entries, got {s.size}")
        if (s < 1).any():
            raise InvalidArgument(f"{node.name}: Upsample scales must be >= 1, got {s.tolist()}")
        return (rs(x, None, s, None),)

    return run


# --------------------------------------------------------------------------------------------
# GridSample, AffineGrid


@cpu_kernel("GridSample", since=16)
def grid_sample(node: KernelNode) -> KernelFn:
    attrs = grid_sample_attrs(node)

    def run(x: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray]:
        check_grid(node, x.shape, grid.shape)
        r = x.ndim - 2
        n, c = x.shape[:2]
        ct = compute_dtype(x.dtype)
        g = grid.astype(ct, copy=False)
        # grid's last axis lists (x, y, z): reversed spatial order
        taps_w = [
            grid_axis_taps(np, g[..., r - 1 - a], d, attrs) for a, d in enumerate(x.shape[2:])
        ]
        bidx = np.arange(n).reshape((n,) + (1,) * r)
        xf = x.astype(ct, copy=False)
        y = np.zeros((n, *grid.shape[1:-1], c), ct)
        for combo in itertools.product(*taps_w):
            w = combo[0].weight
            for tap in combo[1:]:
                w = w * tap.weight
            v = _gather(xf, bidx, [t.index for t in combo]) * w[..., None]
            masks = [t.inside for t in combo if t.inside is not None]
            if masks:
                v = np.where(functools.reduce(np.logical_and, masks)[..., None], v, ct.type(0))
            y += v
        return (np.moveaxis(y, -1, 1).astype(x.dtype, copy=False),)

    return run


def _gather(x: np.ndarray, bidx: np.ndarray, idx: Sequence[np.ndarray]) -> np.ndarray:
    """x[b, :, i1, i2, ...] for index arrays shaped like the output: result (N, *out, C)."""
    xt = np.moveaxis(x, 1, -1)  # N, *spatial, C
    key = (bidx, *idx)
    return xt[key]


@cpu_kernel("AffineGrid", since=20)
def affine_grid(node: KernelNode) -> KernelFn:
    align = bool(node.attr("align_corners", 0))

    def run(theta: np.ndarray, size: np.ndarray) -> tuple[np.ndarray]:
        sz = [int(v) for v in np.asarray(size).reshape(-1)]
        r = check_affine_theta(node, theta.shape, sz)
        ct = compute_dtype(theta.dtype)
        base = affine_grid_base(sz[2:], align)
        out = np.matmul(base.astype(ct), theta.astype(ct).transpose(0, 2, 1))  # N, P, r
        return (out.reshape([sz[0], *sz[2:], r]).astype(theta.dtype),)

    return run


@cpu_kernel("Col2Im", since=18)
def col2im(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray, image_shape: np.ndarray, block_shape: np.ndarray) -> tuple[np.ndarray]:
        geo = col2im_geometry(node, x.shape, np.asarray(image_shape), np.asarray(block_shape))
        cols = x.reshape((x.shape[0], geo.channels, -1, *geo.blocks))
        y = np.zeros((x.shape[0], geo.channels, *geo.padded), x.dtype)
        zero = [0] * len(geo.image)  # fold into the padded image, then crop its pads
        for _, src, dst in tap_placements(
            geo.kernel, geo.strides, geo.dilations, zero, geo.blocks, geo.padded
        ):
            y[dst] += cols[src]
        crop: tuple[Any, ...] = (
            Ellipsis,
            *(slice(p, p + i) for p, i in zip(geo.pads_begin, geo.image)),
        )
        return (y[crop],)

    return run
