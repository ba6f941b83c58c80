"""Resize (opset 11+), nearest and linear: per-axis source tables, one compiled pass.

Detection and segmentation heads and FPNs upsample NCHW maps by 2 in H and W. The output
shape comes from `turnout.sdk.semantics.resize_targets` (so every provider resizes to the same
shape); each resized axis then gets a table of source indices (nearest) or of two taps and their
weights (linear), from the same module's `nearest_indices` and `filter_taps`, and the tables are
kept per (input shape, scales, sizes): when those come from initializers, as they usually
do, the tables are computed on the first run only. The last two axes are resized by one
compiled call over (outer, H, W): nearest is a gather (on the bytes, so any fixed-width dtype
is served by one kernel per item size), linear resizes every input row along W and then
blends two of those rows per output row (the inner loop is contiguous). Axes before the last
two (NHWC layouts, 3-D volumes) are resized first by a numpy pass with the same tables.

Claimed: coordinate_transformation_mode half_pixel, half_pixel_symmetric, pytorch_half_pixel,
align_corners, asymmetric, tf_half_pixel_for_nn; nearest_mode round_prefer_floor,
round_prefer_ceil, floor, ceil; exclude_outside; keep_aspect_ratio_policy and axes. Declined
with a reason (the numpy kernel runs them): cubic, antialias, tf_crop_and_resize, linear on
integers or 16-bit floats, Resize before opset 11.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import attr_text
from turnout.sdk import semantics
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.resize import (
    filter_taps,
    nearest_indices,
    resize_targets,
    source_coordinates,
)

from ..codegen import numba_array
from ..registry import BuildContext, numba_kernel

__all__ = ["COORDINATE_MODES", "NEAREST_MODES"]

# the shared modes this kernel claims (tf_crop_and_resize and Resize-10's "simple" go to numpy)
COORDINATE_MODES = tuple(m for m in semantics.COORDINATE_MODES if m != "tf_crop_and_resize")
NEAREST_MODES = tuple(m for m in semantics.NEAREST_MODES if m != "simple")

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# ---------------------------------------------------------------------------- kernels


def _nearest2d(x: Any, iy: Any, ix: Any, pairs: bool, out: Any) -> None:  # pragma: no cover
    """out[o, y, j] = x[o, iy[y], ix[j]]. An output row whose source row is the previous one's
    is a copy of it (while it is in cache); `pairs` says ix repeats every input column twice
    (2x upsampling), written as two stores per input element instead of a gather (2-3x
    faster). Elements are indexed without row views: a view per (short) row costs reference
    counting that showed at 40-element rows."""
    oh = iy.shape[0]
    ow = ix.shape[0]
    w = x.shape[2]
    for o in prange(x.shape[0]):
        for y in range(oh):
            r = iy[y]
            if y > 0 and r == iy[y - 1]:
                for j in range(ow):
                    out[o, y, j] = out[o, y - 1, j]
            elif pairs:
                for i in range(w):
                    v = x[o, r, i]
                    out[o, y, 2 * i] = v
                    out[o, y, 2 * i + 1] = v
            else:
                for j in range(ow):
                    out[o, y, j] = x[o, r, ix[j]]


def _linear2d(x: Any, iy: Any, wy: Any, ix: Any, wx: Any, out: Any) -> None:  # pragma: no cover
    """Each input row resized along W (two taps), then two of those rows blended per output
    row: the second loop is contiguous and vectorizes."""
    h = x.shape[1]
    oh = iy.shape[0]
    ow = ix.shape[0]
    for o in prange(x.shape[0]):
        rows = np.empty((h, ow), out.dtype)
        for r in range(h):
            src = x[o, r]
            t = rows[r]
            for j in range(ow):
                t[j] = src[ix[j, 0]] * wx[j, 0] + src[ix[j, 1]] * wx[j, 1]
        for y in range(oh):
            a = rows[iy[y, 0]]
            b = rows[iy[y, 1]]
            wa = wy[y, 0]
            wb = wy[y, 1]
            dst = out[o, y]
            for j in range(ow):
                dst[j] = a[j] * wa + b[j] * wb


# ---------------------------------------------------------------------------- the node


def _applies(kn: KernelNode) -> str | None:
    info = kn.inputs[0]
    if info is None or info.elem_type is None or info.dtype is None:
        return "input type unknown at session creation"
    mode = attr_text(kn.attr("mode"), "nearest")
    coord = attr_text(kn.attr("coordinate_transformation_mode"), "half_pixel")
    nearest = attr_text(kn.attr("nearest_mode"), "round_prefer_floor")
    dt = info.dtype
    if mode not in ("nearest", "linear"):
        return f"Resize mode {mode!r} is not compiled by numba"
    if coord not in COORDINATE_MODES:
        return f"coordinate_transformation_mode {coord!r} is not compiled by numba"
    if mode == "nearest" and nearest not in NEAREST_MODES:
        return f"nearest_mode {nearest!r} is not compiled by numba"
    if int(kn.attr("antialias", 0)):
        return "antialias is not compiled by numba"
    if mode == "linear" and dt.name not in ("float32", "float64"):
        return f"linear Resize on {dt} is not compiled by numba"
    if dt.kind in "OSU" or dt.itemsize not in _UINT:
        return f"Resize on {dt} is not compiled by numba"
    return None


class _Plan:
    """How one input shape is resized: numpy passes over leading axes, then the last two."""

    __slots__ = ("lead", "out_shape", "tables")

    def __init__(self, out_shape: tuple[int, ...], lead: list[Any], tables: Any) -> None:
        self.out_shape = out_shape
        self.lead = lead  # (axis, table) for resized axes before the last two
        self.tables = tables  # the (H, W) tables of the compiled pass, or None


class _Resize:
    """The run function of one Resize node (see the module docstring)."""

    def __init__(self, kn: KernelNode, ctx: BuildContext) -> None:
        self.name = kn.name
        self.linear = attr_text(kn.attr("mode"), "nearest") == "linear"
        self.coord = attr_text(kn.attr("coordinate_transformation_mode"), "half_pixel")
        self.nearest = attr_text(kn.attr("nearest_mode"), "round_prefer_floor")
        self.exclude = bool(kn.attr("exclude_outside", 0))
        self.policy = attr_text(kn.attr("keep_aspect_ratio_policy"), "stretch")
        axes = kn.attr("axes", None)
        self.axes = None if axes is None else [int(a) for a in axes]
        dt = self.dt = np.dtype(kn.inputs[0].dtype)
        idx1 = types.Array(types.int64, 1, "C", readonly=True)
        idx2 = types.Array(types.int64, 2, "C", readonly=True)
        if self.linear:
            w2 = numba_array(dt, 2, readonly=True, layout="C")
            sig = types.void(
                numba_array(dt, 3, readonly=True, layout="C"), idx2, w2, idx2, w2,
                numba_array(dt, 3, readonly=False, layout="C"),
            )  # fmt: skip
            self.kern = ctx.jit(_linear2d, [sig])
            self.view = dt
        else:
            u = numba_array(np.dtype(_UINT[dt.itemsize]), 3, readonly=True, layout="C")
            uidx = types.Array(types.uint64, 1, "C", readonly=True)  # no negative-index fixup
            sig = types.void(u, idx1, uidx, types.boolean,
                             numba_array(u.dtype, 3, readonly=False, layout="C"))  # fmt: skip
            self.kern = ctx.jit(_nearest2d, [sig])
            self.view = np.dtype(_UINT[dt.itemsize])
        # (shape, scales, sizes, plan) of the last run: one tuple, replaced whole, so that
        # runs on other threads never see one run's key with another's plan
        self._last: tuple[Any, Any, Any, _Plan] | None = None
        self._plans: dict[tuple[Any, ...], _Plan] = {}

    def _table(self, out_len: int, in_len: int, scale: float) -> Any:
        src = source_coordinates(self.coord, out_len, in_len, scale)
        if not self.linear:
            return nearest_indices(src, self.nearest, scale, in_len)
        idx, w = filter_taps(src, in_len, "linear", scale, exclude_outside=self.exclude)
        return idx, w.astype(self.dt)

    def _identity(self, n: int) -> Any:
        idx = np.arange(n, dtype=np.int64)
        if not self.linear:
            return idx
        w = np.zeros((n, 2), self.dt)
        w[:, 0] = 1
        return np.stack([idx, idx], axis=1), w

    def _make_plan(self, shape: tuple[int, ...], roi: Any, scales: Any, sizes: Any) -> _Plan:
        axes, sc, sz, _ = resize_targets(
            self.name, self.axes, self.policy, self.coord, shape, roi, scales, sizes
        )
        rank = len(shape)
        out = list(shape)
        per_axis: dict[int, Any] = {}
        for a, s, o in zip(axes, sc, sz):
            out[a] = o
            if o != shape[a] or s != 1.0:
                per_axis[a] = self._table(o, shape[a], s)
        lead = [(a, per_axis[a]) for a in sorted(per_axis) if a < rank - 2]
        tables: tuple[Any, ...] | None = None
        last = [a for a in per_axis if a >= rank - 2]
        if last:
            h_axis, w_axis = rank - 2, rank - 1
            th = per_axis.get(h_axis) if h_axis >= 0 else None
            tw = per_axis.get(w_axis)
            if th is None:
                th = self._identity(shape[h_axis] if h_axis >= 0 else 1)
            if tw is None:
                tw = self._identity(shape[w_axis])
            if self.linear:
                tables = (th, tw)
            else:  # unsigned columns (no negative-index fixup), and whether 2x in W
                ow, w = len(tw), shape[w_axis]
                pairs = ow == 2 * w and bool((tw == np.arange(ow) // 2).all())
                tables = (th, tw.astype(np.uint64), pairs)
        for t in [*(t for _, t in lead), *(tables or ())]:
            for arr in t if isinstance(t, tuple) else (t,):
                if isinstance(arr, np.ndarray):
                    arr.flags.writeable = False
        return _Plan(tuple(out), lead, tables)

    def _plan_for(self, x: Any, roi: Any, scales: Any, sizes: Any) -> _Plan:
        """The plan of this input: the last one when the same shape and the same scales and
        sizes arrays come in (initializers), else from a cache keyed by their values."""
        last = self._last
        if last is not None and last[0] == x.shape and last[1] is scales and last[2] is sizes:
            return last[3]
        value_key = (
            x.shape,
            None if scales is None else np.asarray(scales, np.float32).tobytes(),
            None if sizes is None else np.asarray(sizes, np.int64).tobytes(),
            None if roi is None else np.asarray(roi, np.float64).tobytes(),
        )
        plan = self._plans.get(value_key)
        if plan is None:
            plan = self._make_plan(x.shape, roi, scales, sizes)
            if len(self._plans) < 64:
                self._plans[value_key] = plan
        if all(v is None or not v.flags.writeable for v in (scales, sizes)):
            self._last = (x.shape, scales, sizes, plan)
        return plan

    def _lead_pass(self, x: Any, axis: int, table: Any) -> Any:
        """One leading axis resized with numpy (NHWC layouts, volumes)."""
        if not self.linear:
            return np.take(x, table, axis=axis)
        idx, w = table
        shape = [1] * x.ndim
        shape[axis] = -1
        y = np.take(x, idx[:, 0], axis=axis) * w[:, 0].reshape(shape)
        y += np.take(x, idx[:, 1], axis=axis) * w[:, 1].reshape(shape)
        return y

    def __call__(
        self, x: Any, roi: Any = None, scales: Any = None, sizes: Any = None
    ) -> tuple[Any]:
        if x.ndim == 0:
            raise InvalidArgument(f"{self.name}: Resize input must have rank >= 1")
        plan = self._plan_for(x, roi, scales, sizes)
        y = x
        for axis, table in plan.lead:
            y = self._lead_pass(y, axis, table)
        if plan.tables is None:
            return (np.array(y, copy=y is x),)
        th, tw = plan.tables[:2]
        shape = y.shape
        h = shape[-2] if len(shape) > 1 else 1
        w = shape[-1]
        oh, ow = plan.out_shape[-2] if len(shape) > 1 else 1, plan.out_shape[-1]
        outer = math.prod(shape[:-2])
        out = np.empty(plan.out_shape, x.dtype)
        if out.size == 0:
            return (out,)
        if y.size == 0:
            raise InvalidArgument(
                f"{self.name}: cannot resize an empty input {x.shape} to {out.shape}"
            )
        x3 = np.ascontiguousarray(y).reshape(outer, h, w).view(self.view)
        o3 = out.reshape(outer, oh, ow).view(self.view)
        if self.linear:
            self.kern(out.size, x3, th[0], th[1], tw[0], tw[1], o3)
        else:
            self.kern(out.size, x3, th, tw, plan.tables[2], o3)
        return (out,)


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    return _Resize(kn, ctx)


numba_kernel("Resize", since=11, applies=_applies)(_build)
