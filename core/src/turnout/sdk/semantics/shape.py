"""Axis normalisation and the shape ops' plans (Split's chunk sizes, Slice's index, Squeeze's
and Unsqueeze's shapes), once for every provider.

A provider that copies these rules drifts: before this module the CPU provider checked Split's
negative sizes, `num_outputs` and the even split, OpenCL checked neither of the first two, and
CuPy wrapped the axis with `axis % ndim`. Every provider computes them here, so the same bad
node raises the same `InvalidArgument` whichever provider runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import attr_text
from turnout.sdk.provider import KernelNode

__all__ = [
    "BlockPlan",
    "cut_axis",
    "depth_to_space_plan",
    "norm_axes",
    "norm_axis",
    "reduce_axes",
    "slice_index",
    "space_to_depth_plan",
    "split_request",
    "split_sizes",
    "squeezed_shape",
    "unsqueezed_shape",
]


def _bad(node: KernelNode | str, msg: str) -> InvalidArgument:
    return InvalidArgument(f"{node if isinstance(node, str) else node.name}: {msg}")


def norm_axis(node: KernelNode | str, axis: int, rank: int, *, scalar: bool = False) -> int:
    """`axis` in [-rank, rank) mapped to [0, rank); anything else is an InvalidArgument naming
    the node (or the name given) (never wrapped with `axis % rank`, which would run a node
    onnx rejects).

    `scalar`: a rank-0 input takes axis 0 as its one axis (the reductions, ArgMax, the
    normalisations: what the CPU provider and onnxruntime accept)."""
    if not -rank <= axis < (max(rank, 1) if scalar else rank):
        raise _bad(node, f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(
    node: KernelNode | str, axes: Sequence[int], rank: int, *, scalar: bool = False
) -> list[int]:
    """Each axis normalised by `norm_axis`; duplicates are an InvalidArgument."""
    out = [norm_axis(node, int(a), rank, scalar=scalar) for a in axes]
    if len(set(out)) != len(out):
        raise _bad(node, f"axes {list(axes)} contain duplicates")
    return out


def reduce_axes(node: KernelNode | str, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """A reduction's `axes`, normalised and sorted; a scalar's one axis is 0, and reducing it
    reduces nothing (an empty tuple)."""
    out = norm_axes(node, axes, rank, scalar=True)
    return tuple(sorted(out)) if rank else ()


def cut_axis(node: KernelNode | str, axis: int, rank: int) -> int:
    """Where an axis cuts a shape in two, `axis` in [-rank, rank] mapped to [0, rank]: Flatten's
    axis and the opset < 13 Softmax family's (the input coerced to 2-D at it)."""
    if not -rank <= axis <= rank:
        raise _bad(node, f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def squeezed_shape(
    node: KernelNode, shape: tuple[int, ...], axes: Sequence[int] | None
) -> tuple[int, ...]:
    """Squeeze's output shape: `axes` (each of size 1) dropped, or every 1 where None."""
    if axes is None:
        return tuple(d for d in shape if d != 1)
    ax = norm_axes(node, axes, len(shape))
    for a in ax:
        if shape[a] != 1:
            raise _bad(node, f"cannot squeeze axis {a} of size {shape[a]} (shape {shape})")
    return tuple(d for i, d in enumerate(shape) if i not in ax)


def unsqueezed_shape(
    node: KernelNode, shape: tuple[int, ...], axes: Sequence[int]
) -> tuple[int, ...]:
    """Unsqueeze's output shape: a 1 at each of `axes`, counted in the output's rank."""
    rank = len(shape) + len(axes)
    ax = set(norm_axes(node, axes, rank))
    dims = iter(shape)
    return tuple(1 if i in ax else next(dims) for i in range(rank))


def split_request(node: KernelNode, split_in: Any = None) -> list[int] | None:
    """The explicit chunk sizes a Split node asks for, None for equal parts.

    They come from the `split` attribute at opsets 2-12 and from the `split` input at 1 and
    13+; an empty list before opset 13 means equal parts, as onnx.reference reads it.
    """
    attr_form = 2 <= node.since_version < 13
    if attr_form or split_in is None:
        sp = node.attr("split")
    else:
        sp = np.asarray(split_in).ravel().tolist()
    if sp is None or (not len(sp) and node.since_version < 13):
        return None
    return [int(s) for s in sp]


def split_sizes(
    node: KernelNode, dim: int, split: Sequence[int] | None, n_out: int, num_outputs: int | None
) -> list[int]:
    """Chunk sizes for Split: explicit, `num_outputs` (the last chunk smaller), or equal parts.

    Explicit sizes must be non-negative, one per output, summing to `dim`; `num_outputs` must
    equal the node's output count; equal parts must divide `dim`.
    """
    if split is not None:
        sizes = [int(s) for s in split]
        if len(sizes) != n_out or sum(sizes) != dim or any(s < 0 for s in sizes):
            raise _bad(node, f"split {sizes} does not divide a dim of {dim} into {n_out} outputs")
        return sizes
    if num_outputs is not None:
        num_outputs = int(num_outputs)
        if num_outputs != n_out or num_outputs < 1:
            raise _bad(node, f"num_outputs {num_outputs} but node has {n_out} outputs")
        chunk = -(-dim // num_outputs)
        last = dim - chunk * (num_outputs - 1)
        if last < 0:
            raise _bad(node, f"cannot split a dim of {dim} into {num_outputs} outputs")
        return [chunk] * (num_outputs - 1) + [last]
    if dim % n_out:
        raise _bad(node, f"cannot split a dim of {dim} evenly into {n_out} outputs")
    return [dim // n_out] * n_out


def slice_index(
    node: KernelNode,
    shape: tuple[int, ...],
    starts: list[int],
    ends: list[int],
    axes: list[int] | None,
    steps: list[int] | None,
) -> tuple[slice, ...]:
    """ONNX Slice's parameters as one Python slice per axis of `shape`: negative starts and
    ends wrap once, then clamp per the step's sign; lengths that differ, a zero step, an axis
    out of range or repeated are InvalidArgument."""
    n = len(starts)
    if (
        len(ends) != n
        or (axes is not None and len(axes) != n)
        or (steps is not None and len(steps) != n)
    ):
        raise _bad(node, "starts, ends, axes and steps must have the same length")
    ax = norm_axes(node, axes if axes is not None else range(n), len(shape))
    idx = [slice(None)] * len(shape)
    for i, a in enumerate(ax):
        dim = shape[a]
        step = 1 if steps is None else steps[i]
        if step == 0:
            raise _bad(node, "slice step is zero")
        s, e = starts[i], ends[i]
        if s < 0:
            s += dim
        if e < 0:
            e += dim
        if step > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        idx[a] = slice(s, e if e >= 0 else None, step)
    return tuple(idx)


class BlockPlan(NamedTuple):
    """DepthToSpace or SpaceToDepth as view, transpose, view: the input viewed as `split`
    (6-d), its axes permuted by `perm`, the result viewed as `out`."""

    split: tuple[int, ...]
    perm: tuple[int, ...]
    out: tuple[int, ...]


def depth_to_space_plan(node: KernelNode, shape: Sequence[int]) -> BlockPlan:
    """DepthToSpace of an NCHW `shape` in the node's mode (DCR or CRD)."""
    bs = int(node.attr("blocksize"))
    if len(shape) != 4 or shape[1] % (bs * bs):
        raise _bad(node, f"input shape {tuple(shape)} is not NCHW with C divisible by {bs * bs}")
    b, c, h, w = (int(d) for d in shape)
    cc = c // (bs * bs)
    out = (b, cc, h * bs, w * bs)
    if attr_text(node.attr("mode"), "DCR") == "DCR":
        return BlockPlan((b, bs, bs, cc, h, w), (0, 3, 4, 1, 5, 2), out)
    return BlockPlan((b, cc, bs, bs, h, w), (0, 1, 4, 2, 5, 3), out)


def space_to_depth_plan(node: KernelNode, shape: Sequence[int]) -> BlockPlan:
    """SpaceToDepth of an NCHW `shape` in the node's mode (DCR, or CRD where the opset has
    the attribute)."""
    bs = int(node.attr("blocksize"))
    if len(shape) != 4 or shape[2] % bs or shape[3] % bs:
        raise _bad(node, f"input shape {tuple(shape)} is not NCHW with H, W divisible by {bs}")
    b, c, h, w = (int(d) for d in shape)
    split = (b, c, h // bs, bs, w // bs, bs)
    crd = attr_text(node.attr("mode"), "DCR") == "CRD"
    perm = (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4)
    return BlockPlan(split, perm, (b, c * bs * bs, h // bs, w // bs))
