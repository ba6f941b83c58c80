"""Concat: narrow C-contiguous pieces copied row by row in one compiled call each.

numpy's concatenate copies each piece as [outer, width] rows; for narrow rows (a detector's
[B, N, 2] box centres and sizes, joined on the last axis) its strided copy costs 1-2 ns an
element, where a compiled row loop moves them at a few tenths. Wide rows (an axis near the
front: one block per piece) and views (a piece that is a Transpose's view) stay numpy copies
into the output's slice, which are memcpy-fast or no slower. Data of any fixed-width dtype is
moved as unsigned integers of its item size. Shapes, axes and errors are turnout's numpy
kernel's: a set of shapes that does not concatenate goes to it, and it raises.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import types

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.shape import norm_axis

from .. import cache
from ..registry import BuildContext, numba_kernel, numpy_kernel
from .gather import _NB_UINT, _UINT  # item size -> the unsigned type that moves it

__all__: list[str] = []

NARROW = 64
"""Rows of at most this many elements go to the compiled copy (measured at widths 2 and 81
over 4800-6300 rows: 2x and 1.5x numpy); wider ones are numpy's per-row memcpy."""
MIN_ROWS = 64
"""Fewer rows than this are numpy's: the compiled call's fixed cost (~2 us) is not repaid."""


def _rows(src: Any, dst: Any, w: int, outer: int, width: int, off: int) -> None:
    """dst[o * width + off + j] = src[o * w + j]: piece rows into the output's rows. Unsigned
    indices: with signed ones LLVM keeps numba's negative-index wraparound and the copy stays
    scalar (measured 5x slower)."""
    for o in range(outer):
        s = np.uint64(o * w)
        d = np.uint64(o * width + off)
        for j in range(w):
            dst[d + np.uint64(j)] = src[s + np.uint64(j)]


def _kernel(itemsize: int) -> Any:
    u = _NB_UINT[itemsize]
    i64 = types.int64
    sig = types.void(
        types.Array(u, 1, "C", readonly=True), types.Array(u, 1, "C"), i64, i64, i64, i64
    )
    return cache.jit(_rows, [sig])


def _applies(kn: KernelNode) -> str | None:
    out = kn.outputs[0] if kn.outputs else None
    if out is None or out.elem_type is None or out.dtype is None:
        return "output type unknown at session creation"
    if out.dtype.kind in "OSU" or out.dtype.itemsize not in _UINT:
        return f"Concat of {out.dtype} is not compiled by numba"
    return None


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    numpy_concat = numpy_kernel(kn)  # shapes it cannot join: it raises the error
    dtype = kn.outputs[0].dtype
    kern = _kernel(dtype.itemsize)
    u = _UINT[dtype.itemsize]
    axis0 = int(kn.attr("axis", 1))
    empty, prod = np.empty, math.prod
    memo: list[Any] = [None, None]  # input shapes, their plan

    def plan(xs: tuple[Any, ...]) -> Any:
        """(output shape, outer, output row width, per piece (row width, offset in the row,
        compiled?, its slice of the output)), or None where numpy's kernel should decide
        (every error but an axis out of range, refused here as there)."""
        if not xs or any(x.dtype != dtype for x in xs):
            return None
        rank = xs[0].ndim
        axis = norm_axis(kn, axis0, rank)  # the numpy kernel's check and message
        if any(x.ndim != rank for x in xs):
            return None
        first = xs[0].shape
        for x in xs[1:]:
            if x.shape[:axis] != first[:axis] or x.shape[axis + 1 :] != first[axis + 1 :]:
                return None
        shape = (*first[:axis], sum(x.shape[axis] for x in xs), *first[axis + 1 :])
        outer = prod(first[:axis])
        if outer < MIN_ROWS:
            return None
        inner = prod(first[axis + 1 :])
        pieces, off, at = [], 0, 0
        lead = (slice(None),) * axis
        for x in xs:
            n = x.shape[axis]
            pieces.append((n * inner, off, 0 < n * inner <= NARROW, (*lead, slice(at, at + n))))
            off += n * inner
            at += n
        if not any(p[2] for p in pieces):
            return None
        return shape, outer, off, pieces

    def run(*xs: Any) -> tuple[Any, ...]:
        shapes = tuple(x.shape for x in xs)
        if memo[0] != shapes:
            memo[1] = plan(xs)
            memo[0] = shapes
        p = memo[1]
        if p is None:
            return tuple(numpy_concat(*xs))
        shape, outer, width, pieces = p
        out = empty(shape, dtype)
        flat = out.reshape(-1).view(u)
        for x, (w, off, compiled, where) in zip(xs, pieces):
            if compiled and x.flags.c_contiguous:
                kern(x.reshape(-1).view(u), flat, w, outer, width, off)
            elif w:
                out[where] = x  # numpy's copy: any layout, a memcpy per row when wide
        return (out,)

    return run


numba_kernel("Concat", since=4, applies=_applies)(_build)
