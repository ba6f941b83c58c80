"""Pooling kernels: MaxPool, AveragePool, LpPool, Global*Pool, MaxUnpool, MaxRoiPool, RoiAlign.

Windowed pools loop over the kernel offsets (a handful) and combine strided slices of the
padded input, so every step is one vectorized numpy operation over the whole output. Window
geometry (auto_pad, ceil_mode, dilations) comes from `conv.py`, shared with Conv. A kernel keeps
the geometry, the window slices and (AveragePool) the window sizes of its last input shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.conv import compute_dtype, pad_spatial, window_slices
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.geometry import conv_geometry, pool_kernel_shape, spatial_attrs
from turnout.sdk.semantics.sampling import check_roi_align, roi_align_attrs, roi_samples
from turnout.sdk.semantics.unfold import max_unpool_shapes

__all__: list[str] = []


def _setup(node: KernelNode, x: np.ndarray) -> tuple[Any, ...]:
    nd = len(_spatial_axes(node, x))
    kernel = pool_kernel_shape(node, nd)
    strides, dilations = spatial_attrs(node, nd, kernel)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    pb, pe, out = conv_geometry(node, x.shape[2:], kernel, strides, dilations, ceil_mode)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    return list(kernel), strides, dilations, pb, pe, out, eff


def _planner(
    node: KernelNode, extra: Callable[[np.ndarray, tuple[Any, ...]], Any] | None = None
) -> Callable[[np.ndarray], tuple[Any, ...]]:
    """`plan(x)`: (`_setup`'s geometry, the window slices, `extra(x, geometry)`), made once
    per input shape and dtype and kept while they stay."""
    memo: tuple[Any, Any] = (None, None)

    def plan(x: np.ndarray) -> tuple[Any, ...]:
        nonlocal memo
        seen, made = memo
        if (x.shape, x.dtype) != seen:
            geo = _setup(node, x)
            kernel, strides, dilations, _, _, out, _ = geo
            made = (geo, window_slices(kernel, strides, dilations, out))
            made += (None if extra is None else extra(x, geo),)
            memo = ((x.shape, x.dtype), made)
        return made

    return plan


def _lowest(dt: np.dtype[Any]) -> Any:
    if dt.kind in "iu":
        return np.iinfo(dt).min
    return -np.inf


def _first_in_window(
    x: np.ndarray, strides: list[int], dilations: list[int], pb: list[int], out: list[int]
) -> np.ndarray:
    """Each window's first tap inside the input (row-major order): (N, C, *out)."""
    first = []
    for s, d, b, o, n in zip(strides, dilations, pb, out, x.shape[2:]):
        start = np.arange(o) * s - b
        skip = np.where(start < 0, -(start // d), 0)  # taps in the begin padding
        first.append(np.minimum(start + skip * d, n - 1))
    taps = (Ellipsis, *np.ix_(*first))
    return x[taps]


def _max_pool(
    node: KernelNode,
    storage_order: int,
    x: np.ndarray,
    want_indices: bool,
    plan: Callable[[np.ndarray], tuple[Any, ...]] | None = None,
) -> tuple[Any, ...]:
    """onnxruntime's max: a window starts from its first tap inside the input and takes a later
    tap only when it is strictly greater. So NaN wins only as that first tap (later NaNs never
    compare greater), and of equal maxima the first is indexed. onnxruntime's own loop does
    this for Indices, dilations and non-float32 types; its float32 MLAS path (no Indices)
    follows SIMD operand order instead (1-D ignores NaN), so Y here does not depend on whether
    Indices is asked for."""
    if plan is None:
        geo = _setup(node, x)
        slices = window_slices(geo[0], geo[1], geo[2], geo[5])
    else:
        geo, slices, _ = plan(x)
    kernel, strides, dilations, pb, pe, out, eff = geo
    xp = pad_spatial(x, pb, pe, out, eff, strides, _lowest(x.dtype))
    if not want_indices:
        y = xp[slices[0]].copy()
        nan = x.dtype.kind in "fV"
        for sl in slices[1:]:
            (np.fmax if nan else np.maximum)(y, xp[sl], out=y)  # fmax skips NaN
        if nan and x.size and np.isnan(x.max()):  # max propagates NaN: a cheap test for one
            first = _first_in_window(x, strides, dilations, pb, out)
            starts_nan = np.isnan(first)
            if starts_nan.any():
                np.copyto(y, first, where=starts_nan)
        return (y, None)
    inside = pad_spatial(np.ones((1, 1, *x.shape[2:]), bool), pb, pe, out, eff, strides, False)
    y = np.full(xp[slices[0]].shape, _lowest(x.dtype), x.dtype)
    seen = np.zeros(inside[slices[0]].shape, bool)
    best = np.zeros(y.shape, np.int64)
    for ki, sl in enumerate(slices):
        v, valid = xp[sl], inside[sl]
        take = valid & (~seen | (v > y))
        np.copyto(y, v, where=take)
        best[take] = ki
        seen = seen | valid
    # Offsets -> input coordinates -> flat index into the unpadded input.
    nd = x.ndim - 2
    offs = np.unravel_index(best, kernel)
    coords = []
    for a in range(nd):
        pos = np.arange(out[a]).reshape((-1,) + (1,) * (nd - 1 - a)) * strides[a] - pb[a]
        coords.append(pos + offs[a] * dilations[a])
    sp = x.shape[2:]
    if storage_order:
        flat = np.zeros(y.shape, np.int64)
        mult = 1
        for a in range(nd):
            flat += coords[a] * mult
            mult *= sp[a]
    else:
        flat = np.ravel_multi_index(tuple(coords), sp, mode="wrap") if nd else best
    nc = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * nd)
    return (y, flat + nc * int(np.prod(sp)))


@cpu_kernel("MaxPool", since=1)
def max_pool(node: KernelNode) -> KernelFn:
    storage_order = int(node.attr("storage_order", 0))
    want = len(node.node.outputs) > 1 and bool(node.node.outputs[1])
    plan = _planner(node)

    def run(x: np.ndarray) -> tuple[Any, ...]:
        y, idx = _max_pool(node, storage_order, x, want, plan)
        return (y, idx) if len(node.node.outputs) > 1 else (y,)

    return run


def _sum_pool(
    x: np.ndarray,
    xp_val: Callable[[np.ndarray], np.ndarray],
    geo: tuple[Any, ...],
    slices: list[tuple[Any, ...]] | None = None,
) -> np.ndarray:
    kernel, strides, dilations, pb, pe, out, eff = geo
    xp = pad_spatial(xp_val(x), pb, pe, out, eff, strides, 0)
    if slices is None:
        slices = window_slices(kernel, strides, dilations, out)
    y = xp[slices[0]].copy()
    for sl in slices[1:]:
        y += xp[sl]
    return y


def _window_counts(shape: tuple[int, ...], geo: tuple[Any, ...], include_pad: bool) -> np.ndarray:
    """How many elements each window averages: real pixels, plus explicit pads if included."""
    kernel, strides, dilations, pb, pe, out, eff = geo
    ones = np.ones((1, 1, *shape), np.float64)
    if include_pad:
        ones = np.pad(ones, [(0, 0), (0, 0)] + [(b, e) for b, e in zip(pb, pe)], constant_values=1)
        geo = (kernel, strides, dilations, [0] * len(pb), [0] * len(pb), out, eff)
    return _sum_pool(ones, lambda a: a, geo)


@cpu_kernel("AveragePool", since=1)
def average_pool(node: KernelNode) -> KernelFn:
    include = bool(node.attr("count_include_pad", 0))

    def counts(x: np.ndarray, geo: tuple[Any, ...]) -> np.ndarray:
        c = _window_counts(x.shape[2:], geo, include).astype(compute_dtype(x.dtype))
        c.flags.writeable = False
        return c

    plan = _planner(node, counts)

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        geo, slices, sizes = plan(x)
        ct = sizes.dtype
        s = _sum_pool(x, lambda a: a.astype(ct, copy=False), geo, slices)
        return ((s / sizes).astype(x.dtype, copy=False),)

    return run


def _lp_norm(x: np.ndarray, p: float, sum_fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """(sum |x|^p)^(1/p) in x's dtype, computed wider; `sum_fn` sums windows or whole axes."""
    ct = compute_dtype(x.dtype)
    s = sum_fn(np.abs(x.astype(ct, copy=False)) ** ct.type(p))
    return (s ** ct.type(1.0 / p)).astype(x.dtype, copy=False)


@cpu_kernel("LpPool", since=1)
def lp_pool(node: KernelNode) -> KernelFn:
    p = float(node.attr("p", 2.0))
    plan = _planner(node)

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        geo, slices, _ = plan(x)
        return (_lp_norm(x, p, lambda a: _sum_pool(a, lambda v: v, geo, slices)),)

    return run


def _spatial_axes(node: KernelNode, x: np.ndarray) -> tuple[int, ...]:
    if x.ndim < 3:
        raise InvalidArgument(
            f"{node.name}: input must be at least 3-D (N, C, spatial...), got {x.shape}"
        )
    return tuple(range(2, x.ndim))


@cpu_kernel("GlobalAveragePool", since=1)
def global_average_pool(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray]:
        axes = _spatial_axes(node, x)
        ct = compute_dtype(x.dtype)
        return (np.mean(x, axis=axes, keepdims=True, dtype=ct).astype(x.dtype, copy=False),)

    return run


@cpu_kernel("GlobalMaxPool", since=1)
def global_max_pool(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray]:
        return (np.max(x, axis=_spatial_axes(node, x), keepdims=True),)

    return run


@cpu_kernel("GlobalLpPool", since=1)
def global_lp_pool(node: KernelNode) -> KernelFn:
    p = float(node.attr("p", 2.0))

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        axes = _spatial_axes(node, x)
        return (_lp_norm(x, p, lambda a: np.sum(a, axis=axes, keepdims=True)),)

    return run


@cpu_kernel("MaxUnpool", since=9)
def max_unpool(node: KernelNode) -> KernelFn:
    def run(
        x: np.ndarray, idx: np.ndarray, output_shape: np.ndarray | None = None
    ) -> tuple[np.ndarray]:
        inferred, shape = max_unpool_shapes(
            node, x.shape, idx.shape, None if output_shape is None else np.asarray(output_shape)
        )
        y = np.zeros(int(np.prod(inferred)), x.dtype)
        flat = idx.reshape(-1).astype(np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= y.size):
            raise InvalidArgument(f"{node.name}: index out of range for output of shape {inferred}")
        y[flat] = x.reshape(-1)
        if shape == inferred:
            return (y.reshape(inferred),)
        # Indices address the inferred shape; a larger output_shape extends it with zeros at
        # the end of each axis (as the ONNX spec's example and test data do).
        res = np.zeros(shape, x.dtype)
        res[tuple(slice(0, i) for i in inferred)] = y.reshape(inferred)
        return (res,)

    return run


@cpu_kernel("MaxRoiPool", since=1)
def max_roi_pool(node: KernelNode) -> KernelFn:
    ph, pw = (int(v) for v in node.attr("pooled_shape"))
    scale = float(node.attr("spatial_scale", 1.0))

    def run(x: np.ndarray, rois: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 5:
            raise InvalidArgument(
                f"{node.name}: X must be 4-D and rois (num_rois, 5), got {x.shape}, {rois.shape}"
            )
        n, c, h, w = x.shape
        y = np.zeros((rois.shape[0], c, ph, pw), x.dtype)
        for r, roi in enumerate(rois):
            b = int(roi[0])
            if not 0 <= b < n:
                raise InvalidArgument(f"{node.name}: roi batch index {b} out of range [0, {n})")
            x1, y1, x2, y2 = (int(np.round(float(v) * scale)) for v in roi[1:])
            rh = max(y2 - y1 + 1, 1)
            rw = max(x2 - x1 + 1, 1)
            for i in range(ph):
                hs = min(max(int(np.floor(i * rh / ph)) + y1, 0), h)
                he = min(max(int(np.ceil((i + 1) * rh / ph)) + y1, 0), h)
                for j in range(pw):
                    ws = min(max(int(np.floor(j * rw / pw)) + x1, 0), w)
                    we = min(max(int(np.ceil((j + 1) * rw / pw)) + x1, 0), w)
                    if he > hs and we > ws:
                        y[r, :, i, j] = x[b, :, hs:he, ws:we].max(axis=(1, 2))
        return (y,)

    return run


@cpu_kernel("RoiAlign", since=10)
def roi_align(node: KernelNode) -> KernelFn:
    attrs = roi_align_attrs(node)
    oh, ow = attrs.out_h, attrs.out_w

    def run(x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray) -> tuple[np.ndarray]:
        check_roi_align(node, x.shape, rois.shape, batch_indices.shape)
        n, c, h, w = x.shape
        if batch_indices.size and (batch_indices.min() < 0 or batch_indices.max() >= n):
            raise InvalidArgument(f"{node.name}: batch index out of range [0, {n})")
        ct = compute_dtype(x.dtype)
        xf = x.astype(ct, copy=False)
        y = np.zeros((rois.shape[0], c, oh, ow), ct)
        for r in range(rois.shape[0]):
            sy, sx = roi_samples(attrs, rois[r], h, w)
            wy, wx = sy.weight_high, sx.weight_high
            img = xf[int(batch_indices[r])]
            # samples: (C, oh*gh, ow*gw) per corner, weighted
            valid = (sy.valid[:, None] & sx.valid[None, :]).astype(ct)
            corners = [
                (img[:, sy.low][:, :, sx.low], (1 - wy)[:, None] * (1 - wx)[None, :]),
                (img[:, sy.low][:, :, sx.high], (1 - wy)[:, None] * wx[None, :]),
                (img[:, sy.high][:, :, sx.low], wy[:, None] * (1 - wx)[None, :]),
                (img[:, sy.high][:, :, sx.high], wy[:, None] * wx[None, :]),
            ]
            bins = (c, oh, sy.per_bin, ow, sx.per_bin)
            if attrs.mode == "max":
                s = None
                for v, wt in corners:
                    t = v * (wt * valid).astype(ct)
                    s = t if s is None else np.maximum(s, t)
                assert s is not None
                y[r] = s.reshape(bins).max(axis=(2, 4))
            else:
                s = sum(v * (wt * valid).astype(ct) for v, wt in corners)
                y[r] = np.asarray(s).reshape(bins).mean(axis=(2, 4))
        return (y.astype(x.dtype, copy=False),)

    return run
