"""Shape and index ops on `be.xp`: views where the layout allows (Reshape, Squeeze, Unsqueeze,
Flatten, Transpose), copies otherwise, and indexed reads bounds-checked on the device.

Shape-like inputs (Reshape's shape, Slice's starts/ends/axes/steps, Expand's shape, Tile's
repeats, axes inputs) stay in host memory (`host_inputs`), as do Shape's and Size's outputs.
Gather and GatherElements check their indices on the device: the kernel records a device flag
(`DeviceChecks`), reads with a clamped index, and the run raises `InvalidArgument` naming the
node and the input when the flag is set, after the stream is synchronized, without a host
round trip per node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.dtypes import np_dtype
from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import shape as shape_sem

from ..backend import Backend
from .registry import cuda_kernel

__all__ = ["checked_indices"]


def _ints(v: Any) -> list[int]:
    return [int(a) for a in np.asarray(v).ravel()]


def checked_indices(be: Backend, kn: KernelNode, idx: Any, n: int, axis: int) -> Any:
    """`idx` (negative counts from the end) as in-range indices into an extent of `n`; an
    index outside [-n, n) flags the run's error, naming the node and the indices input."""
    xp = be.xp
    if idx.size:
        bad = xp.any((idx < -n) | (idx >= n))
        name = kn.inputs[1].name if len(kn.inputs) > 1 and kn.inputs[1] is not None else "?"
        be.checks.flag(
            bad,
            f"{kn.op_type} node {kn.name!r}: an index in {name!r} is out of range "
            f"[-{n}, {n - 1}] for axis {axis} (checked on the device)",
        )
    idx = xp.where(idx < 0, idx + n, idx)
    return xp.clip(idx, 0, max(n - 1, 0))


@cuda_kernel("Reshape", 5, host_inputs=(1,))
def reshape(kn: KernelNode, be: Backend) -> KernelFn:
    allow_zero = bool(kn.attr("allowzero", 0))

    def run(x: Any, shape: Any) -> tuple[Any]:
        dims = _ints(shape)
        if not allow_zero:
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        try:
            return (x.reshape(dims),)
        except ValueError as e:
            raise InvalidArgument(
                f"Reshape node {kn.name!r}: cannot reshape {tuple(x.shape)} to {dims}: {e}"
            ) from None

    return run


@cuda_kernel("Flatten", 1)
def flatten(kn: KernelNode, be: Backend) -> KernelFn:
    axis = int(kn.attr("axis", 1))

    def run(x: Any) -> tuple[Any]:
        ax = shape_sem.cut_axis(kn, axis, x.ndim)
        rows = int(np.prod(x.shape[:ax], dtype=np.int64))
        return (x.reshape(rows, int(np.prod(x.shape[ax:], dtype=np.int64))),)

    return run


def _squeeze(from_input: bool) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        attr = kn.attr("axes")

        def run(x: Any, axes: Any = None) -> tuple[Any]:
            raw = axes if from_input else attr
            given = None if raw is None else _ints(raw)
            return (x.reshape(shape_sem.squeezed_shape(kn, x.shape, given)),)

        return run

    return build


def _unsqueeze(from_input: bool) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        attr = kn.attr("axes")

        def run(x: Any, axes: Any = None) -> tuple[Any]:
            raw = _ints(axes if from_input else attr)
            return (x.reshape(shape_sem.unsqueezed_shape(kn, x.shape, raw)),)

        return run

    return build


cuda_kernel("Squeeze", 1, until=12)(_squeeze(False))
cuda_kernel("Squeeze", 13, host_inputs=(1,))(_squeeze(True))
cuda_kernel("Unsqueeze", 1, until=12)(_unsqueeze(False))
cuda_kernel("Unsqueeze", 13, host_inputs=(1,))(_unsqueeze(True))


@cuda_kernel("Transpose", 1)
def transpose(kn: KernelNode, be: Backend) -> KernelFn:
    perm = kn.attr("perm")

    def run(x: Any) -> tuple[Any]:
        p = list(perm) if perm is not None else list(reversed(range(x.ndim)))
        return (be.xp.ascontiguousarray(x.transpose(p)),)

    return run


@cuda_kernel("Concat", 4)
def concat(kn: KernelNode, be: Backend) -> KernelFn:
    axis = int(kn.attr("axis"))
    return lambda *xs: (be.xp.concatenate(xs, axis=shape_sem.norm_axis(kn, axis, xs[0].ndim)),)


def _split(kind: str) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        axis = int(kn.attr("axis", 0))
        n_out = len(kn.node.outputs)
        num_outputs = kn.attr("num_outputs")

        def run(x: Any, split: Any = None) -> tuple[Any, ...]:
            ax = shape_sem.norm_axis(kn, axis, x.ndim)
            asked = shape_sem.split_request(kn, split if kind == "input" else None)
            sizes = shape_sem.split_sizes(kn, x.shape[ax], asked, n_out, num_outputs)
            bounds = np.cumsum([0, *sizes])
            return tuple(
                be.xp.ascontiguousarray(
                    x[(slice(None),) * ax + (slice(int(bounds[k]), int(bounds[k + 1])),)]
                )
                for k in range(len(sizes))
            )

        return run

    return build


cuda_kernel("Split", 2, until=12)(_split("attr"))
cuda_kernel("Split", 13, host_inputs=(1,))(_split("input"))


@cuda_kernel("Slice", 10, host_inputs=(1, 2, 3, 4))
def slice_(kn: KernelNode, be: Backend) -> KernelFn:
    def run(x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> tuple[Any]:
        ax = _ints(axes) if axes is not None else None
        st = _ints(steps) if steps is not None else None
        shape = tuple(x.shape)
        index = shape_sem.slice_index(kn, shape, _ints(starts), _ints(ends), ax, st)
        return (be.xp.ascontiguousarray(x[index]),)

    return run


@cuda_kernel("Expand", 8, host_inputs=(1,))
def expand(kn: KernelNode, be: Backend) -> KernelFn:
    def run(x: Any, shape: Any) -> tuple[Any]:
        target = np.broadcast_shapes(tuple(x.shape), tuple(_ints(shape)))
        return (be.xp.ascontiguousarray(be.xp.broadcast_to(x, target)),)

    return run


@cuda_kernel("Tile", 6, host_inputs=(1,))
def tile(kn: KernelNode, be: Backend) -> KernelFn:
    return lambda x, reps: (be.xp.tile(x, _ints(reps)),)


@cuda_kernel("Shape", 1, host_outputs=(0,))
def shape(kn: KernelNode, be: Backend) -> KernelFn:
    start, end = kn.attr("start", 0), kn.attr("end")

    def run(x: Any) -> tuple[Any]:
        dims = list(x.shape)
        n = len(dims)
        lo = min(max(start + n if start < 0 else start, 0), n)
        hi = n if end is None else min(max(end + n if end < 0 else end, 0), n)
        return (np.array(dims[lo:hi], dtype=np.int64),)

    return run


@cuda_kernel("Size", 1, host_outputs=(0,))
def size(kn: KernelNode, be: Backend) -> KernelFn:
    return lambda x: (np.array(x.size, dtype=np.int64),)


@cuda_kernel("ConstantOfShape", 9, host_inputs=(0,))
def constant_of_shape(kn: KernelNode, be: Backend) -> KernelFn:
    value = kn.attr("value")
    fill = np.asarray(value).ravel()[0] if value is not None else np.float32(0)

    def run(shape: Any) -> tuple[Any]:
        return (be.xp.full(tuple(_ints(shape)), fill, dtype=np.asarray(fill).dtype),)

    return run


@cuda_kernel("Range", 11, host_inputs=(0, 1, 2))
def range_(kn: KernelNode, be: Backend) -> KernelFn:
    def run(start: Any, limit: Any, delta: Any) -> tuple[Any]:
        dt = np.asarray(start).dtype
        s, lim, d = (np.asarray(v).item() for v in (start, limit, delta))
        n = max(int(np.ceil((lim - s) / d)), 0)
        return ((be.xp.arange(n, dtype=dt) * d + s).astype(dt),)

    return run


def _indexed(take: str) -> Any:
    """Gather (`xp.take`) or GatherElements (`xp.take_along_axis`) with checked indices."""

    def build(kn: KernelNode, be: Backend) -> KernelFn:
        axis = int(kn.attr("axis", 0))
        f = getattr(be.xp, take)

        def run(x: Any, idx: Any) -> tuple[Any]:
            ax = shape_sem.norm_axis(kn, axis, x.ndim)
            i = checked_indices(be, kn, idx.astype(np.int64), x.shape[ax], ax)
            return (f(x, i, axis=ax),)

        return run

    return build


cuda_kernel("Gather", 13)(_indexed("take"))
cuda_kernel("GatherElements", 13)(_indexed("take_along_axis"))


@cuda_kernel("Trilu", 14, host_inputs=(1,))
def trilu(kn: KernelNode, be: Backend) -> KernelFn:
    upper = bool(kn.attr("upper", 1))

    def run(x: Any, k: Any = None) -> tuple[Any]:
        kk = _ints(k)[0] if k is not None else 0
        return ((be.xp.triu if upper else be.xp.tril)(x, kk),)

    return run


@cuda_kernel("EyeLike", 9)
def eye_like(kn: KernelNode, be: Backend) -> KernelFn:
    k = int(kn.attr("k", 0))
    dtype = kn.attr("dtype")

    def run(x: Any) -> tuple[Any]:
        dt = np_dtype(int(dtype)) if dtype is not None else x.dtype
        return (be.xp.eye(x.shape[0], x.shape[1], k=k, dtype=dt),)

    return run


def _depth_space(to_space: bool) -> Any:
    plan = shape_sem.depth_to_space_plan if to_space else shape_sem.space_to_depth_plan

    def build(kn: KernelNode, be: Backend) -> KernelFn:
        def run(x: Any) -> tuple[Any]:
            p = plan(kn, tuple(x.shape))
            y = x.reshape(p.split).transpose(p.perm)
            return (be.xp.ascontiguousarray(y).reshape(p.out),)

        return run

    return build


cuda_kernel("DepthToSpace", 13)(_depth_space(True))
cuda_kernel("SpaceToDepth", 13)(_depth_space(False))
