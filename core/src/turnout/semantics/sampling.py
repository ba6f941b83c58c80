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

from ..errors import InvalidArgument
from ..provider import KernelNode
from .resize import cubic_weights

__all__ = [
    "GridSampleAttrs",
    "Tap",
    "affine_grid_base",
    "check_affine_theta",
    "check_grid",
    "grid_axis_taps",
    "grid_sample_attrs",
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


def _str(v: Any, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def grid_sample_attrs(node: KernelNode) -> GridSampleAttrs:
    """GridSample's mode, padding_mode and align_corners, checked."""
    mode = _str(node.attr("mode", None), "bilinear" if node.since_version < 20 else "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = _str(node.attr("padding_mode", None), "zeros")
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
                w = cubic_weights(f - o, -0.75)
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
