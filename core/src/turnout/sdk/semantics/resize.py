"""Resize and Upsample: output sizes, source coordinates and per-axis tap tables.

Resize is separable. For each resized axis a provider needs, per output position, the source
coordinate (`source_coordinates`, per coordinate_transformation_mode) and from it either one
source index (`nearest_indices`) or a few source indices with weights (`filter_taps`: linear 2,
cubic 4, antialias wider). Every provider builds its tables with these functions, so they all
resize to the same shape (`resize_targets`) with the same taps and fill the same value outside a
tf_crop_and_resize box (`extrapolation_fill`). Tables are float64 numpy arrays; a device provider
uploads them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.semantics.shape import norm_axes

__all__ = [
    "COORDINATE_MODES",
    "KEEP_ASPECT_RATIO_POLICIES",
    "MODES",
    "NEAREST_MODES",
    "cubic_weights",
    "extrapolation_fill",
    "filter_taps",
    "nearest_indices",
    "outside_roi",
    "resize_attr_error",
    "resize_targets",
    "source_coordinates",
]

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
# "simple" is the rule of Upsample and Resize-10 (floor when enlarging, ceil when shrinking)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
KEEP_ASPECT_RATIO_POLICIES = ("stretch", "not_larger", "not_smaller")


def resize_attr_error(mode: str, coord: str, nearest: str, policy: str = "stretch") -> str | None:
    """Why these Resize attributes are not valid (None when they are): a provider's `supports`
    can decline with it, a kernel raises it."""
    if mode not in MODES:
        return f"unsupported mode {mode!r}"
    if coord not in COORDINATE_MODES:
        return f"unsupported coordinate_transformation_mode {coord!r}"
    if nearest not in NEAREST_MODES:
        return f"unsupported nearest_mode {nearest!r}"
    if policy not in KEEP_ASPECT_RATIO_POLICIES:
        return f"unsupported keep_aspect_ratio_policy {policy!r}"
    return None


def cubic_weights(t: np.ndarray, a: float, xp: Any = np) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient `a` (cubic_coeff_a), at distances `t`
    (an array of module `xp`: numpy, or CuPy for weights computed on the device)."""
    t = xp.abs(t)
    t2, t3 = t * t, t * t * t
    near = (a + 2) * t3 - (a + 3) * t2 + 1
    far = a * t3 - 5 * a * t2 + 8 * a * t - 4 * a
    return xp.where(t <= 1, near, xp.where(t < 2, far, 0.0))  # type: ignore[no-any-return]


def source_coordinates(
    mode: str, out_len: int, in_len: int, scale: float, roi: tuple[float, float] | None = None
) -> np.ndarray:
    """Each output position's source coordinate (float64), per coordinate_transformation_mode
    (`roi` is the axis's start and end for tf_crop_and_resize)."""
    y = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        offset = in_len / 2 * (1 - adjustment)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "align_corners":
        return y * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if mode != "tf_crop_and_resize" or roi is None:
        raise ValueError(f"coordinate_transformation_mode {mode!r} (roi {roi})")
    start, end = roi
    if out_len > 1:
        return start * (in_len - 1) + y * (end - start) * (in_len - 1) / (out_len - 1)
    return np.full(out_len, 0.5 * (start + end) * (in_len - 1))


def nearest_indices(src: np.ndarray, mode: str, scale: float, in_len: int) -> np.ndarray:
    """The input index (int64, clamped into the input) each coordinate reads under
    `nearest_mode`. Halves are told apart by the fraction, not by floor(x + 0.5), which rounds
    up a coordinate just below one half."""
    base = np.floor(src)
    frac = src - base
    if mode == "round_prefer_floor":
        r = np.where(frac > 0.5, base + 1, base)
    elif mode == "round_prefer_ceil":
        r = np.where(frac >= 0.5, base + 1, base)
    elif mode == "floor":
        r = base
    elif mode == "ceil":
        r = np.ceil(src)
    elif mode == "simple":
        r = np.ceil(src) if scale < 1 else base
    else:
        raise ValueError(f"nearest_mode {mode!r}")
    out: np.ndarray = np.clip(r, 0, max(in_len - 1, 0)).astype(np.int64)
    return out


def filter_taps(
    src: np.ndarray,
    in_len: int,
    mode: str,
    scale: float,
    cubic_coeff_a: float = -0.75,
    antialias: bool = False,
    exclude_outside: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (out, taps): the input pixels around each coordinate and their
    weights for `mode` linear (2 taps) or cubic (4). Antialias, when shrinking, widens the
    filter by 1/scale and normalizes the weights. Pixels outside the input are clamped to its
    edge, or, with `exclude_outside`, weigh 0 and the rest are scaled to sum 1."""
    base = np.floor(src)
    ratio = src - base
    support = 1.0 if mode == "linear" else 2.0
    fs = min(scale, 1.0) if antialias else 1.0
    start = int(np.floor(-support / fs)) + 1
    taps = np.arange(start, 2 - start)  # pixel offsets from floor(src)
    t = (taps[None, :] - ratio[:, None]) * fs
    if mode == "linear":
        w = np.clip(1 - np.abs(t), 0, 1)
    elif mode == "cubic":
        w = cubic_weights(t, cubic_coeff_a)
    else:
        raise ValueError(f"filter mode {mode!r}")
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    idx = base.astype(np.int64)[:, None] + taps[None, :]
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
        tot = w.sum(axis=1, keepdims=True)
        w = w / np.where(tot == 0, 1.0, tot)
    return np.clip(idx, 0, max(in_len - 1, 0)), w


def outside_roi(src: np.ndarray, in_len: int) -> np.ndarray:
    """Which output positions of a tf_crop_and_resize axis read outside the input (they take
    `extrapolation_value`)."""
    out: np.ndarray = (src < 0) | (src > in_len - 1)
    return out


def resize_targets(
    name: str,
    axes_attr: Sequence[int] | None,
    policy: str,
    coord: str,
    shape: tuple[int, ...],
    roi: Any,
    scales: Any,
    sizes: Any,
) -> tuple[list[int], list[float], list[int], list[tuple[float, float] | None]]:
    """(axes, scales, output sizes, crop boxes) a Resize node asks for on an input `shape`,
    from its `axes` and keep_aspect_ratio_policy attributes and its roi, scales and sizes
    inputs (exactly one of the last two)."""
    rank = len(shape)

    def resolve_axes(n: int) -> list[int]:
        if axes_attr is None:
            axes = list(range(rank))
        else:
            axes = norm_axes(name, axes_attr, rank)
        if n != len(axes):
            raise InvalidArgument(f"{name}: scales/sizes have {n} entries, expected {len(axes)}")
        return axes

    has_sizes = sizes is not None and np.asarray(sizes).size > 0
    has_scales = scales is not None and np.asarray(scales).size > 0
    if has_sizes == has_scales:
        raise InvalidArgument(f"{name}: exactly one of scales and sizes must be given")
    if has_sizes:
        sz = [int(v) for v in np.asarray(sizes).reshape(-1)]
        axes = resolve_axes(len(sz))
        sc = [s / shape[a] if shape[a] else 1.0 for s, a in zip(sz, axes)]
        if policy != "stretch":
            s = min(sc) if policy == "not_larger" else max(sc)
            sc = [s] * len(axes)
            sz = [int(s * shape[a] + 0.5) for a in axes]
    else:
        sc = [float(v) for v in np.asarray(scales, np.float32).reshape(-1)]
        axes = resolve_axes(len(sc))
        if any(s <= 0 for s in sc):
            raise InvalidArgument(f"{name}: scales must be positive, got {sc}")
        sz = [int(np.floor(s * shape[a])) for s, a in zip(sc, axes)]
    rois: list[tuple[float, float] | None] = [None] * len(axes)
    if coord == "tf_crop_and_resize":
        r = np.asarray(roi if roi is not None else [], np.float64).reshape(-1)
        n = len(axes)
        if r.size == 2 * rank and n != rank:
            r = np.concatenate([r[axes], r[[a + rank for a in axes]]])
        if r.size != 2 * n:
            raise InvalidArgument(f"{name}: roi must have {2 * n} entries, got {r.size}")
        rois = [(float(r[i]), float(r[i + n])) for i in range(n)]
    return axes, sc, sz, rois


def extrapolation_fill(value: float, dtype: np.dtype[Any]) -> float | int:
    """The value tf_crop_and_resize writes outside the roi into a `dtype` output: integers
    take `value` rounded half to even and saturated (an exact Python int), as onnx.reference
    does (NaN gives 0); floats take it as it is."""
    if dtype.kind not in "iu":
        return value
    if math.isnan(value):
        return 0
    info = np.iinfo(dtype)
    r = float(np.rint(value))
    return info.min if r < info.min else info.max if r > info.max else int(r)
