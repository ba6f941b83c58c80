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

from ....errors import InvalidArgument
from ....provider import KernelFn, KernelNode
from ....semantics.resize import (
    cubic_weights,
    extrapolation_fill,
    filter_taps,
    nearest_indices,
    outside_roi,
    resize_attr_error,
    resize_targets,
    source_coordinates,
)
from ..registry import cpu_kernel
from .conv import compute_dtype

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


def _str(v: Any, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


@cpu_kernel("Resize", since=10)
def resize(node: KernelNode) -> KernelFn:
    mode = _str(node.attr("mode"), "nearest")
    if node.since_version < 11:
        rs = _Resampler(node, mode, "asymmetric", "simple")

        def run10(x: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray]:
            return (rs(x, None, scales, None),)

        return run10
    coord = _str(node.attr("coordinate_transformation_mode"), "half_pixel")
    rs = _Resampler(node, mode, coord, _str(node.attr("nearest_mode"), "round_prefer_floor"))

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
    mode = _str(node.attr("mode"), "nearest")
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


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect coordinates into [lo, hi] off the nearer border, as many times as needed."""
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    below = x < lo
    above = x > hi
    d = np.where(below, lo - x, np.where(above, x - hi, 0))
    k = np.floor(d / rng)
    r = d - k * rng
    even = k % 2 == 0
    from_lo = np.where(even, lo + r, hi - r)
    from_hi = np.where(even, hi - r, lo + r)
    return np.where(below, from_lo, np.where(above, from_hi, x))


@cpu_kernel("GridSample", since=16)
def grid_sample(node: KernelNode) -> KernelFn:
    mode = _str(node.attr("mode"), "bilinear" if node.since_version < 20 else "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = _str(node.attr("padding_mode"), "zeros")
    align = bool(node.attr("align_corners", 0))
    if mode not in ("linear", "nearest", "cubic") or padding not in (
        "zeros",
        "border",
        "reflection",
    ):
        raise InvalidArgument(f"{node.name}: unsupported mode {mode!r} / padding_mode {padding!r}")

    def run(x: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray]:
        r = x.ndim - 2
        if r < 1 or grid.ndim != x.ndim or grid.shape[-1] != r or grid.shape[0] != x.shape[0]:
            raise InvalidArgument(
                f"{node.name}: grid shape {grid.shape} does not fit X shape {x.shape}"
            )
        if node.since_version < 20 and r != 2:
            raise InvalidArgument(f"{node.name}: GridSample-16 takes 4-D input, got {x.shape}")
        n, c = x.shape[:2]
        dims = x.shape[2:]
        ct = compute_dtype(x.dtype)
        g = grid.astype(ct, copy=False)
        taps_w: list[list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]] = []
        for a, d in enumerate(dims):
            v = g[..., r - 1 - a]  # grid's last axis lists (x, y, z): reversed spatial order
            pos = (v + 1) / 2 * (d - 1) if align else ((v + 1) * d - 1) / 2
            lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
            if mode == "nearest":
                pos = np.rint(pos)
            if padding == "border" and mode != "cubic":
                # (cubic clamps each tap instead, as onnxruntime and PyTorch do)
                pos = np.where((pos < lo) | (pos > hi), np.clip(pos, 0, d - 1), pos)
            elif padding == "reflection":
                pos = _reflect(pos, lo, hi)
            taps: list[tuple[np.ndarray, np.ndarray]] = []
            if mode == "nearest":
                taps.append((pos.astype(np.int64), np.ones_like(pos)))
            else:
                base = np.floor(pos)
                f = pos - base
                offs = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
                for o in offs:
                    w = (
                        np.clip(1 - np.abs(f - o), 0, 1)
                        if mode == "linear"
                        else cubic_weights(f - o, -0.75)
                    )
                    taps.append((base.astype(np.int64) + o, w.astype(ct)))
            fixed = []
            for idx, w in taps:
                inside: np.ndarray | None = None
                if padding == "zeros":  # a tap outside reads the padding 0, not 0 * pixel
                    inside = (idx >= 0) & (idx < d)
                elif padding == "reflection":
                    idx = np.trunc(_reflect(idx.astype(np.float64), lo, hi)).astype(np.int64)
                fixed.append((np.clip(idx, 0, d - 1), w, inside))
            taps_w.append(fixed)
        bidx = np.arange(n).reshape((n,) + (1,) * r)
        xf = x.astype(ct, copy=False)
        y = np.zeros((n, *grid.shape[1:-1], c), ct)
        for combo in itertools.product(*taps_w):
            w = combo[0][1]
            for _, wi, _ in combo[1:]:
                w = w * wi
            v = _gather(xf, bidx, [i for i, _, _ in combo]) * w[..., None]
            masks = [m for _, _, m in combo if m is not None]
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
        r = len(sz) - 2
        if r not in (2, 3) or theta.shape != (sz[0], r, r + 1):
            raise InvalidArgument(f"{node.name}: theta {theta.shape} does not fit size {sz}")
        ct = compute_dtype(theta.dtype)
        axes = []
        for d in sz[2:]:
            if align:
                axes.append(np.linspace(-1, 1, d) if d > 1 else np.zeros(1))
            else:
                axes.append((np.arange(d) * 2 + 1) / d - 1)
        mesh = np.meshgrid(*axes, indexing="ij")  # spatial order (D,) H, W
        base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)], axis=1)
        out = np.matmul(base.astype(ct), theta.astype(ct).transpose(0, 2, 1))  # N, P, r
        return (out.reshape([sz[0], *sz[2:], r]).astype(theta.dtype),)

    return run


@cpu_kernel("Col2Im", since=18)
def col2im(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray, image_shape: np.ndarray, block_shape: np.ndarray) -> tuple[np.ndarray]:
        img = [int(v) for v in np.asarray(image_shape).reshape(-1)]
        blk = [int(v) for v in np.asarray(block_shape).reshape(-1)]
        nd = len(img)
        if len(blk) != nd or x.ndim != 3:
            raise InvalidArgument(
                f"{node.name}: input must be 3-D and image/block shapes equal length"
            )
        strides = list(node.attr("strides", None) or [1] * nd)
        dil = list(node.attr("dilations", None) or [1] * nd)
        pads = list(node.attr("pads", None) or [0] * (2 * nd))
        k = int(np.prod(blk))
        n, ck, length = x.shape
        if ck % k:
            raise InvalidArgument(
                f"{node.name}: input dim 1 ({ck}) not divisible by block size {k}"
            )
        c = ck // k
        padded = [i + pads[a] + pads[a + nd] for a, i in enumerate(img)]
        nb = [(p - ((b - 1) * d + 1)) // s + 1 for p, b, d, s in zip(padded, blk, dil, strides)]
        if int(np.prod(nb)) != length or any(v <= 0 for v in nb):
            raise InvalidArgument(
                f"{node.name}: {length} blocks does not match the image geometry {nb}"
            )
        cols = x.reshape((n, c, k, *tuple(nb)))
        y = np.zeros((n, c, *tuple(padded)), x.dtype)
        for ki, offs in enumerate(itertools.product(*[range(b) for b in blk])):
            sl = tuple(
                slice(o * d, o * d + (m - 1) * s + 1, s)
                for o, d, m, s in zip(offs, dil, nb, strides)
            )
            key: tuple[Any, ...] = (Ellipsis, *sl)
            y[key] += cols[:, :, ki]
        crop = tuple(slice(pads[a], pads[a] + img[a]) for a in range(nd))
        key2: tuple[Any, ...] = (Ellipsis, *crop)
        return (y[key2],)

    return run
