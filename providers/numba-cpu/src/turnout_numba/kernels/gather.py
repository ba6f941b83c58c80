"""Gather and GatherElements: bounds-checked index loops, dtype-generic by byte width.

Data of any fixed-width dtype is moved as unsigned integers of its item size, so one compiled
kernel per (item size, index dtype) serves every element type. Every index is checked before
any data moves: an out-of-range index is an InvalidArgument naming the node, never a wild read.

One compiled call per run does both the check and the copy, serial unless the output is large
(`SERIAL_WORK`), behind a wrapper of a few shape operations: an embedding lookup of one token
is a few microseconds, where a numpy check pass, a second call and a parallel launch cost
~15 us (and a parallel launch on a busy machine waits for every worker thread to be
scheduled).

A Gather over the leading axes (nothing before `axis`: `state[0]`, a row of a shape, an
embedding lookup) with a small output is numpy's `take` instead: one C call that checks the
indices and copies whole rows, under 1 us for a scalar index where the compiled call's
argument checks alone cost about 2 (vad_like's If branch gathers three times per run).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.shape import norm_axis

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


def _gather(data: Any, idx: Any, out: Any) -> int:  # pragma: no cover - compiled by numba
    """out[i, k, :] = data[i, idx[k], :]; returns the position of the first index out of
    [-n, n) (nothing copied), or -1."""
    pre, n, post = data.shape
    m = idx.shape[0]
    for k in range(m):
        v = np.int64(idx[k])
        if v < -n or v >= n:
            return k
    for i in prange(pre):
        for k in range(m):
            j = np.int64(idx[k])
            if j < 0:
                j += n
            for p in range(post):
                out[i, k, p] = data[i, j, p]
    return -1


def _gather_elements(data: Any, idx: Any, out: Any) -> Any:  # pragma: no cover
    """out[i, k, p] = data[i, idx[i, k, p], p]; returns the flat position of the first index
    out of [-n, n) (nothing copied), or -1."""
    pre, n, post = data.shape
    m = idx.shape[1]
    for i in range(pre):
        for k in range(m):
            for p in range(post):
                v = np.int64(idx[i, k, p])
                if v < -n or v >= n:
                    return (i * m + k) * post + p
    for i in prange(pre):
        for k in range(m):
            for p in range(post):
                j = np.int64(idx[i, k, p])
                if j < 0:
                    j += n
                out[i, k, p] = data[i, j, p]
    return -1


def _applies(kn: KernelNode) -> str | None:
    data, ind = kn.inputs[0], kn.inputs[1]
    if data is None or ind is None or data.elem_type is None or ind.elem_type is None:
        return "input types unknown at session creation"
    if data.dtype is None or data.dtype.kind in "OSU" or data.dtype.itemsize not in _UINT:
        return f"{kn.op_type} on {data.dtype} is not compiled by numba"
    if ind.dtype not in _NB_IDX:
        return f"index dtype {ind.dtype} is not compiled by numba"
    return None


def _signature(kn: KernelNode, ndim_idx: int) -> Any:
    u = _NB_UINT[kn.inputs[0].dtype.itemsize]
    return types.int64(
        types.Array(u, 3, "C", readonly=True),
        types.Array(_NB_IDX[kn.inputs[1].dtype], ndim_idx, "C", readonly=True),
        types.Array(u, 3, "C"),
    )


def _out_of_range(name: str, indices: Any, bad: int, n: int) -> InvalidArgument:
    value = int(np.asarray(indices).reshape(-1)[bad])
    return InvalidArgument(f"{name}: index {value} out of range for an axis of size {n}")


TAKE_MAX = 1 << 14
"""Largest Gather output (elements) with nothing before its axis that numpy's `take` serves;
larger ones run the compiled loop, which can split the rows across threads."""


def _build_gather(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    kern = ctx.jit(_gather, [_signature(kn, 1)])
    axis0 = int(kn.attr("axis", 0))
    name = kn.name
    view = _UINT[kn.inputs[0].dtype.itemsize]
    empty, contiguous, prod = np.empty, np.ascontiguousarray, math.prod
    take_max = TAKE_MAX
    # (data shape, axis, axis size, elements before the axis, after it): planned once per
    # data shape (a model gathers from one shape run after run), one tuple so that
    # concurrent runs never read half of an update
    memo: tuple[Any, int, int, int, int] = ((), 0, 0, 0, 0)

    def run(data: Any, indices: Any) -> tuple[Any, ...]:
        nonlocal memo
        shape = data.shape
        planned = memo
        if shape != planned[0] or not shape:
            axis = norm_axis(kn, axis0, len(shape))
            planned = (shape, axis, shape[axis], prod(shape[:axis]), prod(shape[axis + 1 :]))
            memo = planned
        _, axis, n, pre, post = planned
        if pre == 1 and indices.size * post <= take_max:
            try:  # negative indices wrap and any index outside [-n, n) raises, as ONNX says
                out = data.take(indices, axis)
                return (out if type(out) is np.ndarray else np.asarray(out),)  # 0-d: a scalar
            except IndexError:
                bad = np.flatnonzero((indices < -n) | (indices >= n))[0]
                raise _out_of_range(name, indices, int(bad), n) from None
        idx = contiguous(indices).reshape(-1)
        m = idx.shape[0]
        out = empty(shape[:axis] + indices.shape + shape[axis + 1 :], data.dtype)
        d3 = contiguous(data).reshape(pre, n, post).view(view)
        bad = kern(pre * m * post, d3, idx, out.reshape(pre, m, post).view(view))
        if bad >= 0:
            raise _out_of_range(name, indices, bad, n)
        return (out,)

    return run


def _build_gather_elements(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    kern = ctx.jit(_gather_elements, [_signature(kn, 3)])
    axis0 = int(kn.attr("axis", 0))
    name = kn.name
    view = _UINT[kn.inputs[0].dtype.itemsize]
    prod = math.prod

    def run(data: Any, indices: Any) -> tuple[Any, ...]:
        nd = data.ndim
        axis = norm_axis(name, axis0, nd)
        if indices.ndim != nd:
            raise InvalidArgument(f"{name}: indices of rank {indices.ndim} for data of rank {nd}")
        ishape = indices.shape
        if data.shape[:axis] != ishape[:axis] or data.shape[axis + 1 :] != ishape[axis + 1 :]:
            for d in range(nd):
                if d != axis and ishape[d] > data.shape[d]:
                    raise InvalidArgument(
                        f"{name}: indices shape {ishape} exceeds data shape {data.shape}"
                    )
            # data restricted to the index extent on the other axes
            data = data[tuple(slice(0, ishape[d]) if d != axis else slice(None) for d in range(nd))]
        n = data.shape[axis]
        pre, m, post = prod(ishape[:axis]), ishape[axis], prod(ishape[axis + 1 :])
        out = np.empty(ishape, data.dtype)
        d3 = np.ascontiguousarray(data).reshape(pre, n, post).view(view)
        i3 = np.ascontiguousarray(indices).reshape(pre, m, post)
        bad = kern(out.size, d3, i3, out.reshape(pre, m, post).view(view))
        if bad >= 0:
            raise _out_of_range(name, indices, bad, n)
        return (out,)

    return run


numba_kernel("Gather", since=1, applies=_applies)(_build_gather)
numba_kernel("GatherElements", since=11, applies=_applies)(_build_gather_elements)
