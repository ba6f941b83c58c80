"""Gather and GatherElements: bounds-checked index loops, dtype-generic by byte width.

Data of any fixed-width dtype is moved as unsigned integers of its item size, so one compiled
kernel per (item size, index dtype) serves every element type. Every index is checked before
any data moves: an out-of-range index is an InvalidArgument naming the node, never a wild read.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode

from .. import cache
from ..registry import BuildContext, numba_kernel

__all__: list[str] = []

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_NB_UINT: dict[int, types.Integer[Any]] = {
    1: types.uint8,
    2: types.uint16,
    4: types.uint32,
    8: types.uint64,
}
_NB_IDX: dict[np.dtype[Any], types.Integer[Any]] = {
    np.dtype(np.int32): types.int32,
    np.dtype(np.int64): types.int64,
}


def _normalize(idx: Any, n: Any, out: Any) -> int:  # pragma: no cover - compiled by numba
    """Write non-negative indices to `out`; return the position of the first bad one, or -1."""
    for k in range(idx.shape[0]):
        v = np.int64(idx[k])
        if v < 0:
            v += n
        if v < 0 or v >= n:
            return k
        out[k] = v
    return -1


def _gather(data: Any, idx: Any, out: Any) -> None:  # pragma: no cover - compiled by numba
    pre, _, post = data.shape
    m = idx.shape[0]
    for i in prange(pre):
        for k in range(m):
            j = idx[k]
            for p in range(post):
                out[i, k, p] = data[i, j, p]


def _gather_elements(data: Any, idx: Any, out: Any) -> None:  # pragma: no cover
    pre, _, post = data.shape
    m = idx.shape[1]
    for i in prange(pre):
        for k in range(m):
            for p in range(post):
                out[i, k, p] = data[i, idx[i, k, p], p]


def _applies(kn: KernelNode) -> str | None:
    data, ind = kn.inputs[0], kn.inputs[1]
    if data is None or ind is None or data.elem_type is None or ind.elem_type is None:
        return "input types unknown at session creation"
    if data.dtype is None or data.dtype.kind in "OSU" or data.dtype.itemsize not in _UINT:
        return f"{kn.op_type} on {data.dtype} is not compiled by numba"
    if ind.dtype not in _NB_IDX:
        return f"index dtype {ind.dtype} is not compiled by numba"
    return None


def _compile_common(kn: KernelNode) -> tuple[Any, np.dtype[Any], int]:
    size = kn.inputs[0].dtype.itemsize
    it = kn.inputs[1].dtype
    norm = cache.jit(
        _normalize,
        [
            types.int64(
                types.Array(_NB_IDX[it], 1, "C", readonly=True),
                types.int64,
                types.Array(types.int64, 1, "C"),
            )
        ],
    )
    return norm, it, size


def _check(norm: Any, idx: Any, n: int, name: str) -> Any:
    flat = np.ascontiguousarray(idx).reshape(-1)
    out = np.empty(flat.shape[0], np.int64)
    bad = norm(flat, n, out)
    if bad >= 0:
        raise InvalidArgument(
            f"{name}: index {int(flat[bad])} out of range for an axis of size {n}"
        )
    return out


def _build_gather(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    norm, _, size = _compile_common(kn)
    u = _NB_UINT[size]
    kern = cache.jit(
        _gather,
        [
            types.void(
                types.Array(u, 3, "C", readonly=True),
                types.Array(types.int64, 1, "C"),
                types.Array(u, 3, "C"),
            )
        ],
        parallel=ctx.parallel,
    )
    axis0 = int(kn.attr("axis", 0))
    name = kn.name
    view = _UINT[size]

    def run(data: Any, indices: Any) -> tuple[Any, ...]:
        nd = data.ndim
        axis = axis0 + nd if axis0 < 0 else axis0
        if not 0 <= axis < nd:
            raise InvalidArgument(f"{name}: axis {axis0} out of range for rank {nd}")
        n = data.shape[axis]
        idx = _check(norm, indices, n, name)
        pre = int(np.prod(data.shape[:axis]))
        post = int(np.prod(data.shape[axis + 1 :]))
        shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
        out = np.empty(shape, data.dtype)
        if out.size:
            d3 = np.ascontiguousarray(data).reshape(pre, n, post).view(view)
            kern(d3, idx, out.reshape(pre, idx.shape[0], post).view(view))
        return (out,)

    return run


def _build_gather_elements(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    norm, _, size = _compile_common(kn)
    u = _NB_UINT[size]
    kern = cache.jit(
        _gather_elements,
        [
            types.void(
                types.Array(u, 3, "C", readonly=True),
                types.Array(types.int64, 3, "C"),
                types.Array(u, 3, "C"),
            )
        ],
        parallel=ctx.parallel,
    )
    axis0 = int(kn.attr("axis", 0))
    name = kn.name
    view = _UINT[size]

    def run(data: Any, indices: Any) -> tuple[Any, ...]:
        nd = data.ndim
        axis = axis0 + nd if axis0 < 0 else axis0
        if not 0 <= axis < nd or indices.ndim != nd:
            raise InvalidArgument(
                f"{name}: axis {axis0} / index rank {indices.ndim} invalid for data rank {nd}"
            )
        for d in range(nd):
            if d != axis and indices.shape[d] > data.shape[d]:
                raise InvalidArgument(
                    f"{name}: indices shape {indices.shape} exceeds data shape {data.shape}"
                )
        n = data.shape[axis]
        idx = _check(norm, indices, n, name).reshape(indices.shape)
        # data restricted to the index extent on the other axes, then (pre, n, post)
        sub = data[
            tuple(slice(0, indices.shape[d]) if d != axis else slice(None) for d in range(nd))
        ]
        pre = int(np.prod(indices.shape[:axis]))
        post = int(np.prod(indices.shape[axis + 1 :]))
        out = np.empty(indices.shape, data.dtype)
        if out.size:
            d3 = np.ascontiguousarray(sub).reshape(pre, n, post).view(view)
            i3 = idx.reshape(pre, indices.shape[axis], post)
            kern(d3, i3, out.reshape(pre, indices.shape[axis], post).view(view))
        return (out,)

    return run


numba_kernel("Gather", since=1, applies=_applies)(_build_gather)
numba_kernel("GatherElements", since=11, applies=_applies)(_build_gather_elements)
