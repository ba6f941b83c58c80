"""Resize (and Upsample) on `be.xp`, separable: one pass per resized axis.

Output sizes, source coordinates, nearest indices and the linear/cubic/antialias tap tables
come from `turnout.sdk.semantics.resize`, built on the host as small float64 tables and uploaded;
each pass gathers the taps along its axis (`xp.take`) and sums them with their weights.
tf_crop_and_resize writes `extrapolation_value` where any axis reads outside the input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.ir import attr_text
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import (
    extrapolation_fill,
    filter_taps,
    nearest_indices,
    outside_roi,
    resize_attr_error,
    resize_targets,
    source_coordinates,
)

from ..backend import Backend
from .registry import cuda_kernel, numeric_only

__all__: list[str] = []


def _attrs(kn: KernelNode) -> tuple[str, str, str, str]:
    legacy = kn.op_type == "Upsample" or kn.since_version < 11
    mode = attr_text(kn.attr("mode"), "nearest")
    coord = (
        "asymmetric"
        if legacy
        else attr_text(kn.attr("coordinate_transformation_mode"), "half_pixel")
    )
    nearest = "simple" if legacy else attr_text(kn.attr("nearest_mode"), "round_prefer_floor")
    policy = attr_text(kn.attr("keep_aspect_ratio_policy"), "stretch")
    return mode, coord, nearest, policy


def _applies(kn: KernelNode) -> str | None:
    mode, coord, nearest, policy = _attrs(kn)
    why = resize_attr_error(mode, coord, nearest, policy)
    if why is None and mode != "nearest" and kn.inputs and kn.inputs[0] is not None:
        dt = kn.inputs[0].dtype
        if dt is not None and np.dtype(dt).kind != "f":
            why = f"{mode} Resize runs on float tensors here, not {np.dtype(dt)}"
    return why or numeric_only(kn)


def _build(kn: KernelNode, be: Backend, scales_at: int) -> KernelFn:
    xp = be.xp
    mode, coord, nearest, policy = _attrs(kn)
    cubic_a = float(np.float32(kn.attr("cubic_coeff_a", -0.75)))
    antialias = bool(kn.attr("antialias", 0))
    exclude = bool(kn.attr("exclude_outside", 0))
    fill_value = float(np.float32(kn.attr("extrapolation_value", 0.0)))
    axes_attr = kn.attr("axes")
    attr_scales = kn.attr("scales")  # Upsample-7

    def run(x: Any, *rest: Any) -> tuple[Any]:
        roi = rest[0] if scales_at == 2 and len(rest) > 0 else None
        scales = rest[scales_at - 1] if len(rest) >= scales_at else attr_scales
        sizes = rest[scales_at] if scales_at == 2 and len(rest) > 2 else None
        axes, sc, sz, rois = resize_targets(
            kn.name, axes_attr, policy, coord, tuple(x.shape), roi, scales, sizes
        )
        y = x
        outside = []
        for a, s, n_out, box in zip(axes, sc, sz, rois):
            n_in = x.shape[a]
            src = source_coordinates(coord, n_out, n_in, s, box)
            if coord == "tf_crop_and_resize":
                view = [1] * x.ndim
                view[a] = n_out
                outside.append(xp.asarray(outside_roi(src, n_in).reshape(view)))
            if mode == "nearest":
                y = xp.take(y, xp.asarray(nearest_indices(src, nearest, s, n_in)), axis=a)
                continue
            idx, w = filter_taps(src, n_in, mode, s, cubic_a, antialias, exclude)
            taps = xp.take(y, xp.asarray(idx.reshape(-1)), axis=a)
            shape = list(y.shape)
            shape[a : a + 1] = [n_out, idx.shape[1]]
            wshape = [1] * len(shape)
            wshape[a : a + 2] = [n_out, idx.shape[1]]
            wdt = np.float64 if y.dtype == np.float64 else np.float32
            weights = xp.asarray(w.reshape(wshape), dtype=wdt)
            y = xp.sum(taps.reshape(shape) * weights, axis=a + 1).astype(x.dtype)
        if outside:
            mask = outside[0]
            for m in outside[1:]:
                mask = mask | m
            y = xp.where(mask, x.dtype.type(extrapolation_fill(fill_value, x.dtype)), y)
        return (y if y is not x else x.copy(),)

    return run


@cuda_kernel("Resize", 11, applies=_applies, host_inputs=(1, 2, 3))
def resize(kn: KernelNode, be: Backend) -> KernelFn:
    return _build(kn, be, 2)


@cuda_kernel("Resize", 10, until=10, applies=_applies, host_inputs=(1,))
def resize_10(kn: KernelNode, be: Backend) -> KernelFn:
    return _build(kn, be, 1)


@cuda_kernel("Upsample", 9, applies=_applies, host_inputs=(1,))
def upsample(kn: KernelNode, be: Backend) -> KernelFn:
    return _build(kn, be, 1)
