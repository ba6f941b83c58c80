"""Where Pad and CenterCropPad read and write: output shapes, crops, and the source positions
of the reflect/edge/wrap modes, worked out from shapes alone (host integers), with the ops'
checks, so every provider pads alike and refuses the same malformed node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.semantics.shape import norm_axes

__all__ = ["PAD_MODES", "CropPad", "PadPlan", "center_crop_pad_plan", "pad_plan"]

PAD_MODES = frozenset({"constant", "reflect", "edge", "wrap"})


class PadPlan(NamedTuple):
    """How Pad turns its input into its output."""

    crop: tuple[slice, ...] | None
    """Slices that crop the input first (negative pads); None: no crop."""
    out_shape: tuple[int, ...]
    inside: tuple[slice, ...] | None
    """Constant mode: where the cropped input goes in the filled output."""
    gathers: list[tuple[int, np.ndarray[Any, Any]]] | None
    """The other modes: (axis, source positions) gathered in turn; [] when nothing is added."""


class CropPad(NamedTuple):
    """CenterCropPad: the output shape, what of the input is read and where it goes."""

    out_shape: tuple[int, ...]
    src: tuple[slice, ...]
    dst: tuple[slice, ...]


def pad_plan(
    name: str, shape: tuple[int, ...], pads: list[int], mode: str, axes: list[int] | None
) -> PadPlan:
    """How Pad node `name` turns an input of `shape` into its output.

    Negative pads crop first; `constant` then writes the cropped input into a filled buffer,
    the other modes gather along each padded axis with the source positions `np.pad` would
    read (worked out by padding `arange`), so the result is `np.pad`'s.
    """
    if mode not in PAD_MODES:
        raise InvalidArgument(f"{name}: unknown pad mode {mode!r}")
    rank = len(shape)
    ax = list(range(rank)) if axes is None else norm_axes(name, axes, rank)
    if len(pads) != 2 * len(ax):
        raise InvalidArgument(f"{name}: pads has {len(pads)} entries, expected {2 * len(ax)}")
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(ax):
        before[a], after[a] = pads[i], pads[len(ax) + i]
    crop = tuple(
        slice(max(-b, 0), shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(before, after))
    )
    if any(s.start > s.stop for s in crop):
        raise InvalidArgument(f"{name}: pads {pads} crop more than the input shape {shape}")
    cropped = tuple(s.stop - s.start for s in crop)
    kept = None if cropped == tuple(shape) else crop
    width = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    out_shape = tuple(d + b + e for d, (b, e) in zip(cropped, width))
    if mode == "constant":
        inside = tuple(slice(b, b + d) for d, (b, _) in zip(cropped, width))
        return PadPlan(kept, out_shape, inside, None)
    if not any(b or e for b, e in width):
        return PadPlan(kept, out_shape, None, [])
    if math.prod(cropped) == 0:
        raise InvalidArgument(f"{name}: cannot {mode}-pad an empty tensor")
    if mode == "reflect" and any((b or e) and d < 2 for d, (b, e) in zip(cropped, width)):
        raise InvalidArgument(
            f"{name}: reflect padding needs at least 2 elements on padded axes, shape {cropped}"
        )
    gathers = [
        (a, np.pad(np.arange(d), (b, e), mode=cast(Any, mode)))
        for a, (d, (b, e)) in enumerate(zip(cropped, width))
        if b or e
    ]
    return PadPlan(kept, out_shape, None, gathers)


def center_crop_pad_plan(
    name: str, shape: tuple[int, ...], target: list[int], axes: Sequence[int] | None
) -> CropPad:
    """CenterCropPad node `name` on an input of `shape`: each axis cropped or zero-padded to
    its target about the centre (an odd remainder goes to the end)."""
    rank = len(shape)
    ax = list(range(rank)) if axes is None else norm_axes(name, axes, rank)
    if len(target) != len(ax):
        raise InvalidArgument(f"{name}: shape {target} does not match {len(ax)} axes")
    src = [slice(None)] * rank
    dst = [slice(None)] * rank
    out_shape = list(shape)
    for a, t in zip(ax, target):
        dim = shape[a]
        if t < 0:
            raise InvalidArgument(f"{name}: negative target size {t}")
        out_shape[a] = t
        if t < dim:
            off = (dim - t) // 2
            src[a] = slice(off, off + t)
        elif t > dim:
            off = (t - dim) // 2
            dst[a] = slice(off, off + dim)
    return CropPad(tuple(out_shape), tuple(src), tuple(dst))
