"""Selecting ops on `be.xp`: TopK, OneHot, and the ops whose output shape depends on the data
(NonZero, Compress, Unique).

TopK sorts stably on the device, so equal values keep the lower index first (as ONNX asks),
for the largest values too (a stable ascending sort of the reversed axis, read backwards).
NonZero, Compress and Unique cannot know their output's size before the data is read: CuPy
reads the count (or the mask) back to the host to size the output, which is the one host sync
these ops need. Unique groups equal rows with device sorts (`_row_groups`) rather than
`cupy.unique(axis=...)`, which orders rows by a host-driven quicksort that syncs on every
comparison.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import shape as shape_sem

from ..backend import Backend
from .registry import cuda_kernel

__all__: list[str] = []


_axis = shape_sem.norm_axis  # the CPU provider's check and message


def _topk(k_attr: bool) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        axis = int(kn.attr("axis", -1))
        largest = bool(kn.attr("largest", 1))

        def run(x: Any, k_in: Any = None) -> tuple[Any, Any]:
            a = _axis(kn, axis, x.ndim)
            k = int(kn.attr("k")) if k_attr else int(np.asarray(k_in).ravel()[0])
            n = x.shape[a]
            if not 0 <= k <= n:
                raise InvalidArgument(
                    f"TopK node {kn.name!r}: k={k} is outside [0, {n}] for axis {a} of "
                    f"shape {tuple(x.shape)}"
                )
            if largest:  # ties: the lower index first, so sort the reversed axis, read back
                flipped = xp.flip(x, axis=a)
                order = xp.flip(xp.argsort(flipped, axis=a, kind="stable"), axis=a)
                order = (n - 1) - order
            else:
                order = xp.argsort(x, axis=a, kind="stable")
            idx = xp.take(order, xp.arange(k), axis=a)
            return xp.take_along_axis(x, idx, axis=a), idx.astype(np.int64)

        return run

    return build


cuda_kernel("TopK", 1, until=9)(_topk(True))
cuda_kernel("TopK", 10, host_inputs=(1,))(_topk(False))


@cuda_kernel("OneHot", 9, host_inputs=(1,))
def one_hot(kn: KernelNode, be: Backend) -> KernelFn:
    """An index outside [-depth, depth) gives a row of `off` values, as ONNX specifies."""
    xp = be.xp
    axis = int(kn.attr("axis", -1))

    def run(indices: Any, depth: Any, values: Any) -> tuple[Any]:
        d = np.asarray(depth)
        if d.size != 1:
            raise InvalidArgument(
                f"OneHot node {kn.name!r}: depth must have one element, got shape {d.shape}"
            )
        n = int(d.ravel()[0])
        if n < 1:
            raise InvalidArgument(f"OneHot node {kn.name!r}: depth must be positive, got {n}")
        if values.size != 2:
            raise InvalidArgument(
                f"OneHot node {kn.name!r}: values must be [off, on], got shape "
                f"{tuple(values.shape)}"
            )
        idx = indices.astype(np.int64)
        idx = xp.where(idx < 0, idx + n, idx)
        a = _axis(kn, axis, idx.ndim + 1)
        classes = xp.arange(n).reshape((n,) + (1,) * (idx.ndim - a))
        hot = xp.expand_dims(idx, a) == classes
        flat = values.ravel()
        return (xp.where(hot, flat[1], flat[0]).astype(values.dtype),)

    return run


@cuda_kernel("NonZero", 9)
def nonzero(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp

    def run(x: Any) -> tuple[Any]:
        if x.ndim == 0:  # the output's size is the value itself: read on the host
            return (xp.zeros((0, 1 if bool(x) else 0), dtype=np.int64),)
        return (xp.stack(xp.nonzero(x)).astype(np.int64),)

    return run


@cuda_kernel("Compress", 9)
def compress(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    axis = kn.attr("axis")

    def run(x: Any, cond: Any) -> tuple[Any]:
        a = None if axis is None else _axis(kn, int(axis), x.ndim)
        n = x.size if a is None else x.shape[a]
        c = cond.ravel().astype(bool)
        if c.size > n:
            be.checks.flag(
                xp.any(c[n:]),
                f"Compress node {kn.name!r}: the condition selects past the end of an "
                f"extent of {n} (checked on the device)",
            )
            c = c[:n]
        return (xp.compress(c, x if a is not None else x.ravel(), axis=a),)

    return run


def _row_groups(xp: Any, rows: Any) -> tuple[Any, Any, Any]:
    """Equal rows of `rows` (N, M) grouped on the device, in ascending lexicographic order:
    (first occurrence of each group, the group of each row, the rows per group).

    One stable argsort per column, last column first, orders the rows lexicographically and
    keeps equal rows in input order, so a group's first sorted row is its first occurrence.
    NaNs are equal to each other (numpy's `equal_nan`). The number of groups sizes the
    outputs: reading it is the one host sync."""
    n = rows.shape[0]
    order = xp.arange(n)
    for j in range(rows.shape[1] - 1, -1, -1):
        order = order[xp.argsort(rows[order, j], kind="stable")]
    s = rows[order]
    new = xp.ones(n, dtype=bool)
    if n > 1:
        differs = s[1:] != s[:-1]
        if s.dtype.kind in "fc":
            differs &= ~(xp.isnan(s[1:]) & xp.isnan(s[:-1]))
        new[1:] = xp.any(differs, axis=1)
    group = xp.cumsum(new) - 1
    first = order[xp.nonzero(new)[0]]
    inverse = xp.empty(n, dtype=np.int64)
    inverse[order] = group
    return first, inverse, xp.bincount(group, minlength=first.size)


@cuda_kernel("Unique", 11)
def unique(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    axis = kn.attr("axis")
    is_sorted = bool(kn.attr("sorted", 1))
    n_out = len(kn.node.outputs)  # indices, inverse_indices and counts are optional

    def run(x: Any) -> tuple[Any, ...]:
        a = 0 if axis is None else _axis(kn, int(axis), x.ndim)
        moved = x.reshape(-1) if axis is None else xp.moveaxis(x, a, 0)
        first, inv, cnt = _row_groups(xp, moved.reshape(moved.shape[0], -1))
        if not is_sorted:  # in order of first occurrence
            order = xp.argsort(first, kind="stable")
            rank = xp.empty_like(order)
            rank[order] = xp.arange(order.size, dtype=order.dtype)
            first, cnt, inv = first[order], cnt[order], rank[inv]
        u = xp.take(moved, first, axis=0)
        if axis is not None:
            u = xp.ascontiguousarray(xp.moveaxis(u, 0, a))
        i64 = np.int64
        return (u, first.astype(i64), inv.astype(i64), cnt.astype(i64))[:n_out]

    return run
