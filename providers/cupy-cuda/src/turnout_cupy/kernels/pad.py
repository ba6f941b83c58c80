"""Pad (constant, reflect, edge, wrap; negative pads crop) and CenterCropPad on `be.xp`.

Where each op reads and writes comes from `turnout.sdk.semantics.pad`, worked out on the host from
shapes and the host-side pads/axes inputs (`host_inputs`), as on every provider. Constant mode
writes the cropped input into a filled buffer; the other modes gather along each padded axis
with the source positions the plan gives, copied to the device once per plan.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.pad import PAD_MODES, center_crop_pad_plan, pad_plan

from ..backend import Backend
from .registry import cuda_kernel, numeric_only

__all__: list[str] = []


def _ints(v: Any) -> list[int]:
    return [int(a) for a in np.asarray(v).ravel()]


def _pad_applies(kn: KernelNode) -> str | None:
    mode = kn.attr("mode", "constant")
    if mode not in PAD_MODES:
        return f"unknown pad mode {mode!r}"
    return numeric_only(kn)


def _fill(value: Any, dtype: np.dtype[Any]) -> Any:
    """The constant's value as a host scalar of the input's type (0 when absent)."""
    if value is None:
        return dtype.type(0)
    return np.asarray(value).ravel()[0].astype(dtype)


class _Planner:
    """The last plan and its device-side gather indices, kept while the key repeats."""

    def __init__(self, kn: KernelNode, be: Backend, mode: str) -> None:
        self.kn, self.be, self.mode = kn, be, mode
        self.key: Any = None
        self.plan: Any = None
        self.gathers: list[tuple[int, Any]] = []

    def pad(self, x: Any, pads: list[int], axes: list[int] | None, fill: Any) -> Any:
        key = (tuple(x.shape), tuple(pads), None if axes is None else tuple(axes))
        if key != self.key:
            self.plan = pad_plan(self.kn.name, tuple(x.shape), pads, self.mode, axes)
            self.gathers = [(a, self.be.asarray(i)) for a, i in self.plan.gathers or ()]
            self.key = key
        xp, plan = self.be.xp, self.plan
        if plan.crop is not None:
            x = x[plan.crop]
        if plan.inside is not None:
            out = xp.full(plan.out_shape, fill, dtype=x.dtype)
            out[plan.inside] = x
            return out
        for a, index in self.gathers:
            x = xp.take(x, index, axis=a)
        return xp.ascontiguousarray(x)


@cuda_kernel("Pad", 1, until=10, applies=_pad_applies)
def pad_attrs(kn: KernelNode, be: Backend) -> KernelFn:
    planner = _Planner(kn, be, kn.attr("mode", "constant"))
    pads = _ints(kn.attr("pads", kn.attr("paddings", [])))
    value = kn.attr("value", 0.0)
    return lambda x: (planner.pad(x, pads, None, _fill(value, x.dtype)),)


@cuda_kernel("Pad", 11, applies=_pad_applies, host_inputs=(1, 2, 3))
def pad(kn: KernelNode, be: Backend) -> KernelFn:
    planner = _Planner(kn, be, kn.attr("mode", "constant"))

    def run(x: Any, pads: Any, value: Any = None, axes: Any = None) -> tuple[Any]:
        ax = None if axes is None else _ints(axes)
        return (planner.pad(x, _ints(pads), ax, _fill(value, x.dtype)),)

    return run


@cuda_kernel("CenterCropPad", 18, host_inputs=(1,))
def center_crop_pad(kn: KernelNode, be: Backend) -> KernelFn:
    axes = kn.attr("axes")

    def run(x: Any, shape: Any) -> tuple[Any]:
        plan = center_crop_pad_plan(kn.name, tuple(x.shape), _ints(shape), axes)
        out = be.xp.zeros(plan.out_shape, dtype=x.dtype)
        out[plan.dst] = x[plan.src]
        return (out,)

    return run
