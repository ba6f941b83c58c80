"""GridSample's and AffineGrid's semantics: attributes, shape checks, and the source taps
(indices, weights, in-bounds masks) of each grid coordinate, on any array module `xp`.

The taps are index arithmetic on the grid's values, which live where the grid lives: a provider
passes its array module (numpy, CuPy) and gets device arrays back, then gathers and sums the
taps its own way. Every provider decodes the modes and checks shapes here, so a bad mode or a
grid that does not fit X is the same `InvalidArgument` everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import attr_text
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics.resize import cubic_weights

__all__ = [
    "GridSampleAttrs",
    "RoiAlignAttrs",
    "RoiAxisSamples",
    "Tap",
    "affine_grid_base",
    "check_affine_theta",
    "check_grid",
    "check_roi_align",
    "grid_axis_taps",
    "grid_sample_attrs",
    "roi_align_attrs",
    "roi_samples",
]


class GridSampleAttrs(NamedTuple):
    mode: str  # "linear", "nearest" or "cubic" (opset 16's bilinear/bicubic renamed)
    padding: str  # "zeros", "border" or "reflection"
    align_corners: bool


class Tap(NamedTuple):
    """One source tap along one axis: clamped indices, weights, and where a zeros-padded tap
    falls inside the input (None: every tap reads the input)."""

    index: Any
    weight: Any
    inside: Any


def grid_sample_attrs(node: KernelNode) -> GridSampleAttrs:
    """GridSample's mode, padding_mode and align_corners, checked."""
    mode = attr_text(node.attr("mode", None), "bilinear" if node.since_version < 20 else "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = attr_text(node.attr("padding_mode", None), "zeros")
    if mode not in ("linear", "nearest", "cubic") or padding not in (
        "zeros",
        "border",
        "reflection",
    ):
        raise InvalidArgument(f"{node.name}: unsupported mode {mode!r} / padding_mode {padding!r}")
    return GridSampleAttrs(mode, padding, bool(node.attr("align_corners", 0)))


def check_grid(node: KernelNode, x_shape: Sequence[int], grid_shape: Sequence[int]) -> None:
    """The grid is (N, *out, r) for an (N, C, *in) input with r spatial axes (GridSample-16:
    r = 2)."""
    r = len(x_shape) - 2
    if (
        r < 1
        or len(grid_shape) != len(x_shape)
        or grid_shape[-1] != r
        or grid_shape[0] != x_shape[0]
    ):
        raise InvalidArgument(
            f"{node.name}: grid shape {tuple(grid_shape)} does not fit X shape {tuple(x_shape)}"
        )
    if node.since_version < 20 and r != 2:
        raise InvalidArgument(f"{node.name}: GridSample-16 takes 4-D input, got {tuple(x_shape)}")


def _reflect(xp: Any, x: Any, lo: float, hi: float) -> Any:
    """Reflect coordinates into [lo, hi] off the nearer border, as many times as needed."""
    rng = hi - lo
    if rng <= 0:
        return xp.full_like(x, lo)
    below = x < lo
    above = x > hi
    d = xp.where(below, lo - x, xp.where(above, x - hi, 0))
    k = xp.floor(d / rng)
    r = d - k * rng
    even = k % 2 == 0
    from_lo = xp.where(even, lo + r, hi - r)
    from_hi = xp.where(even, hi - r, lo + r)
    return xp.where(below, from_lo, xp.where(above, from_hi, x))


def grid_axis_taps(xp: Any, v: Any, size: int, attrs: GridSampleAttrs) -> list[Tap]:
    """The taps along one input axis of `size` pixels for normalized grid coordinates `v`
    (-1 .. 1, in `v`'s float dtype): one for nearest, two for linear, four for cubic."""
    mode, padding, align = attrs
    pos = (v + 1) / 2 * (size - 1) if align else ((v + 1) * size - 1) / 2
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if mode == "nearest":
        pos = xp.rint(pos)
    if padding == "border" and mode != "cubic":
        # (cubic clamps each tap instead, as onnxruntime and PyTorch do)
        pos = xp.where((pos < lo) | (pos > hi), xp.clip(pos, 0, size - 1), pos)
    elif padding == "reflection":
        pos = _reflect(xp, pos, lo, hi)
    raw: list[tuple[Any, Any]] = []
    if mode == "nearest":
        raw.append((pos.astype(np.int64), xp.ones_like(pos)))
    else:
        base = xp.floor(pos)
        f = pos - base
        for o in (0, 1) if mode == "linear" else (-1, 0, 1, 2):
            if mode == "linear":
                w = xp.clip(1 - xp.abs(f - o), 0, 1)
            else:
                w = cubic_weights(f - o, -0.75, xp)
            raw.append((base.astype(np.int64) + o, w.astype(v.dtype)))
    taps = []
    for idx, w in raw:
        inside = None
        if padding == "zeros":  # a tap outside reads the padding 0, not 0 * pixel
            inside = (idx >= 0) & (idx < size)
        elif padding == "reflection":
            idx = xp.trunc(_reflect(xp, idx.astype(np.float64), lo, hi)).astype(np.int64)
        taps.append(Tap(xp.clip(idx, 0, size - 1), w, inside))
    return taps


def check_affine_theta(node: KernelNode, theta_shape: Sequence[int], size: Sequence[int]) -> int:
    """AffineGrid's theta is (N, r, r + 1) for size (N, C, *r spatial), r 2 or 3; returns r."""
    r = len(size) - 2
    if r not in (2, 3) or tuple(theta_shape) != (size[0], r, r + 1):
        raise InvalidArgument(
            f"{node.name}: theta {tuple(theta_shape)} does not fit size {list(size)}"
        )
    return r


def affine_grid_base(spatial: Sequence[int], align_corners: bool) -> np.ndarray:
    """AffineGrid's base grid: (prod(spatial), r + 1) rows of normalized (x, y[, z], 1), the
    last spatial axis first; the grid is base @ theta^T. Shapes only, so built on the host."""
    axes = []
    for d in spatial:
        if align_corners:
            axes.append(np.linspace(-1, 1, d) if d > 1 else np.zeros(1))
        else:
            axes.append((np.arange(d) * 2 + 1) / d - 1)
    mesh = np.meshgrid(*axes, indexing="ij")  # spatial order (D,) H, W
    cols = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)]
    return np.stack(cols, axis=1)


class RoiAlignAttrs(NamedTuple):
    mode: str  # "avg" or "max"
    out_h: int
    out_w: int
    sampling_ratio: int  # 0: adaptive, ceil(roi size / output size) samples per bin
    spatial_scale: float
    half_pixel: bool  # coordinate_transformation_mode (opset 16's default: half_pixel)


class RoiAxisSamples(NamedTuple):
    """Bilinear samples along one axis of one ROI, `per_bin` per output bin (host arrays):
    the weight of the high neighbour, the low and high indices, and whether the sample lies
    within [-1, size] (outside it samples read 0)."""

    weight_high: np.ndarray
    low: np.ndarray
    high: np.ndarray
    valid: np.ndarray
    per_bin: int


def roi_align_attrs(node: KernelNode) -> RoiAlignAttrs:
    mode = attr_text(node.attr("mode", None), "avg")
    if mode not in ("avg", "max"):
        raise InvalidArgument(f"{node.name}: unknown RoiAlign mode {mode!r}")
    ctm = attr_text(
        node.attr("coordinate_transformation_mode", None),
        "half_pixel" if node.since_version >= 16 else "output_half_pixel",
    )
    return RoiAlignAttrs(
        mode,
        int(node.attr("output_height", 1)),
        int(node.attr("output_width", 1)),
        int(node.attr("sampling_ratio", 0)),
        float(node.attr("spatial_scale", 1.0)),
        ctm == "half_pixel",
    )


def check_roi_align(
    node: KernelNode,
    x_shape: Sequence[int],
    rois_shape: Sequence[int],
    batch_indices_shape: Sequence[int],
) -> None:
    """X (N, C, H, W), rois (R, 4), batch_indices (R,)."""
    if (
        len(x_shape) != 4
        or len(rois_shape) != 2
        or rois_shape[1] != 4
        or tuple(batch_indices_shape) != (rois_shape[0],)
    ):
        raise InvalidArgument(
            f"{node.name}: need X 4-D, rois (R, 4), batch_indices (R,); "
            f"got {tuple(x_shape)}, {tuple(rois_shape)}, {tuple(batch_indices_shape)}"
        )


def _bilinear_1d(pos: np.ndarray, size: int, per_bin: int) -> RoiAxisSamples:
    valid = (pos >= -1.0) & (pos <= size)
    p = np.maximum(pos, 0.0)
    lo = np.floor(p).astype(np.int64)
    at_end = lo >= size - 1
    lo = np.where(at_end, size - 1, lo)
    hi = np.where(at_end, size - 1, lo + 1)
    p = np.where(at_end, lo.astype(np.float64), p)
    return RoiAxisSamples(p - lo, lo, hi, valid, per_bin)


def roi_samples(
    attrs: RoiAlignAttrs, roi: Sequence[float], height: int, width: int
) -> tuple[RoiAxisSamples, RoiAxisSamples]:
    """The (y, x) sample points of one ROI (x1, y1, x2, y2 in input coordinates before
    spatial_scale): how many per bin depends on the ROI's size, so they are computed on the
    host, from the ROI's values."""
    offset = 0.5 if attrs.half_pixel else 0.0
    x1, y1, x2, y2 = (float(v) * attrs.spatial_scale - offset for v in roi)
    rw, rh = x2 - x1, y2 - y1
    if not attrs.half_pixel:
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    out = []
    for start, extent, bins, size in ((y1, rh, attrs.out_h, height), (x1, rw, attrs.out_w, width)):
        step = extent / bins
        g = attrs.sampling_ratio if attrs.sampling_ratio > 0 else int(np.ceil(extent / bins))
        g = max(g, 1)
        pos = start + (np.arange(bins)[:, None] * step + (np.arange(g)[None, :] + 0.5) * step / g)
        out.append(_bilinear_1d(pos.reshape(-1), size, g))
    return out[0], out[1]
