"""GatherND, Scatter, ScatterElements and ScatterND on `be.xp`, indices checked on the device.

Shapes are checked by `turnout.sdk.semantics.indexing` (the same errors as every provider); index
values by `checked_indices` (a device flag naming the node, raised after the run, reads and
writes going on with clamped indices). Scatters address the flat output: each update's linear
position is computed on the device, so one 1-D write serves every rank and reduction. add, max
and min fold repeated positions with the ufunc's `.at` (CuPy's scatter_add/max/min); CuPy has no
multiply `.at`, so mul applies one round per repetition, each round free of repeats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import indexing

from ..backend import Backend
from .registry import cuda_kernel, numeric_only
from .shape import checked_indices

__all__: list[str] = []

_AT = {"add": "add", "max": "maximum", "min": "minimum"}
# the dtypes CuPy's scatter_add / scatter_max / scatter_min (atomics) take
_ATOMIC = {
    "add": frozenset(("float16", "float32", "float64", "int32", "uint32", "uint64")),
    "max": frozenset(("float32", "float64", "int32", "uint32", "uint64")),
    "min": frozenset(("float32", "float64", "int32", "uint32", "uint64")),
}


def _scatter_applies(kn: KernelNode) -> str | None:
    """Decline a reduction on a dtype CuPy's scatter atomics lack (mul and plain writes take
    every dtype)."""
    why = numeric_only(kn)
    reduction = str(kn.attr("reduction", "none"))
    if why is None and reduction in _ATOMIC:
        dt = np.dtype(kn.inputs[0].dtype).name
        if dt not in _ATOMIC[reduction]:
            return f"CuPy has no scatter_{reduction} for {dt} ({kn.op_type} reduction)"
    return why


def _strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides of `shape`."""
    out = [1] * len(shape)
    for a in range(len(shape) - 2, -1, -1):
        out[a] = out[a + 1] * int(shape[a + 1])
    return out


def _nd_rows(be: Backend, kn: KernelNode, idx: Any, dims: Sequence[int], first_axis: int) -> Any:
    """Index rows (..., k) checked against `dims` and as linear offsets (in elements of the
    trailing block) into a C-contiguous array of shape `dims` + block."""
    xp = be.xp
    lin = xp.zeros(idx.shape[:-1], np.int64)
    for j, (n, s) in enumerate(zip(dims, _strides(dims))):
        col = checked_indices(be, kn, idx[..., j].astype(np.int64), n, first_axis + j)
        lin = lin + col * s
    return lin


def _multiply_at(xp: Any, flat: Any, lin: Any, vals: Any) -> None:
    """flat[lin] *= vals with repeated positions all applied: each round takes the first
    update of every distinct position. The loop reads the remaining count on the host (a
    data-dependent shape), once per repetition of the most repeated position."""
    while lin.size:
        pos, first = xp.unique(lin, return_index=True)
        flat[pos] = flat[pos] * vals[first]
        keep = xp.ones(lin.shape, bool)
        keep[first] = False
        lin, vals = lin[keep], vals[keep]


def _write(xp: Any, out: Any, lin: Any, vals: Any, reduction: str | None) -> Any:
    """Scatter 1-D `vals` into the C-contiguous `out` at flat positions `lin`."""
    flat = out.reshape(-1)  # a view: writes land in `out`
    if reduction is None:
        flat[lin] = vals
    elif reduction == "mul":
        _multiply_at(xp, flat, lin, vals)
    else:
        getattr(xp, _AT[reduction]).at(flat, lin, vals)
    return out


def _scatter_elements(kn: KernelNode, be: Backend, reduction: str | None) -> KernelFn:
    xp = be.xp
    axis = int(kn.attr("axis", 0))

    def run(x: Any, idx: Any, updates: Any) -> tuple[Any]:
        a = indexing.index_axis(kn, axis, x.ndim)
        indexing.check_element_indices(kn, idx.shape, x.shape, a, updates.shape)
        out = xp.array(x, copy=True, order="C")
        if not idx.size:
            return (out,)
        strides = _strides(x.shape)
        lin = checked_indices(be, kn, idx.astype(np.int64), x.shape[a], a) * strides[a]
        for d, (n, s) in enumerate(zip(idx.shape, strides)):
            if d != a:
                shape = [1] * idx.ndim
                shape[d] = n
                lin = lin + (xp.arange(n, dtype=np.int64) * s).reshape(shape)
        return (_write(xp, out, lin.reshape(-1), updates.reshape(-1), reduction),)

    return run


@cuda_kernel("Scatter", 9, until=10)
def scatter(kn: KernelNode, be: Backend) -> KernelFn:
    """The opset 9-10 spelling of ScatterElements, without a reduction."""
    return _scatter_elements(kn, be, None)


@cuda_kernel("ScatterElements", 11, applies=_scatter_applies)
def scatter_elements(kn: KernelNode, be: Backend) -> KernelFn:
    return _scatter_elements(kn, be, indexing.scatter_reduction(kn))


@cuda_kernel("ScatterND", 11, applies=_scatter_applies)
def scatter_nd(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    reduction = indexing.scatter_reduction(kn)

    def run(x: Any, idx: Any, updates: Any) -> tuple[Any]:
        k = indexing.nd_index_shape(kn, x.shape, idx.shape, 0).k
        indexing.check_scatter_nd_updates(kn, x.shape, idx.shape, updates.shape)
        out = xp.array(x, copy=True, order="C")
        block = int(np.prod(x.shape[k:], dtype=np.int64))
        rows = _nd_rows(be, kn, idx, x.shape[:k], 0).reshape(-1, 1) * block
        lin = (rows + xp.arange(block, dtype=np.int64)[None, :]).reshape(-1)
        return (_write(xp, out, lin, updates.reshape(-1), reduction),)

    return run


@cuda_kernel("GatherND", 11)
def gather_nd(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    b = int(kn.attr("batch_dims", 0))

    def run(x: Any, idx: Any) -> tuple[Any]:
        k, batches, rows = indexing.nd_index_shape(kn, x.shape, idx.shape, b)
        lin = _nd_rows(be, kn, idx, x.shape[b : b + k], b).reshape(batches, rows)
        flat = x.reshape(batches, -1, *x.shape[b + k :])
        y = flat[xp.arange(batches)[:, None], lin]
        return (y.reshape(tuple(idx.shape[:-1]) + tuple(x.shape[b + k :])),)

    return run
