"""Indexing kernels: Gather, GatherElements, GatherND, Scatter, ScatterElements, ScatterND.

Every index tensor is bounds-checked (negative indices count from the end) so that a bad index is
an `InvalidArgument` naming the node, never a numpy IndexError or a silently wrapped read.
Scatter reductions use the ufunc's unbuffered `.at`, so repeated indices accumulate.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.indexing import (
    check_element_indices,
    check_scatter_nd_updates,
    index_axis,
    nd_index_shape,
    scatter_reduction,
)

__all__: list[str] = []

_REDUCE: dict[str, Any] = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _bad(node: KernelNode, msg: str) -> InvalidArgument:
    return InvalidArgument(f"{node.name}: {msg}")


def checked_indices(node: KernelNode, indices: np.ndarray, dim: Any) -> np.ndarray:
    """int64 indices with negatives wrapped once; any index outside [-dim, dim) raises.

    `dim` may be an int or an array broadcasting against `indices` (GatherND's last axis).
    """
    idx = np.asarray(indices).astype(np.int64)
    if idx.size == 0:
        return idx
    idx = np.where(idx < 0, idx + dim, idx)
    if ((idx < 0) | (idx >= dim)).any():
        bad = np.asarray(indices)[(idx < 0) | (idx >= dim)].ravel()[0]
        raise _bad(node, f"index {int(bad)} is out of bounds (dims {np.ravel(dim).tolist()})")
    return idx


def _reduction(node: KernelNode) -> Any:
    r = scatter_reduction(node)
    return None if r is None else _REDUCE[r]


# --------------------------------------------------------------------------------------------
# Gathers


@cpu_kernel("Gather", since=1)
def gather(node: KernelNode) -> KernelFn:
    axis = node.attr("axis", 0)
    memo: tuple[int, int] = (-1, 0)  # (rank, checked axis)

    def run(x: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray]:
        nonlocal memo
        rank, a = memo
        if x.ndim != rank:
            a = index_axis(node, axis, x.ndim)
            memo = (x.ndim, a)
        if indices.dtype.kind == "i":
            # take reads a negative index from the end once and raises IndexError outside
            # [-dim, dim): ONNX's rule, so the indices need no check of their own (the
            # method: np.take's Python dispatch doubles a small gather's ~1 us)
            try:
                return (x.take(indices, axis=a),)
            except IndexError:
                pass  # the check below raises the node's error
        idx = checked_indices(node, indices, x.shape[a])
        return (x.take(idx, axis=a),)

    return run


def element_index(
    node: KernelNode, idx: np.ndarray, axis: int, shape: tuple[int, ...]
) -> tuple[Any, ...]:
    """An advanced index selecting along `axis` by `idx` and by position on every other axis."""
    check_element_indices(node, idx.shape, shape, axis)
    grids = list(np.ix_(*[np.arange(n) for n in idx.shape]))
    grids[axis] = checked_indices(node, idx, shape[axis])
    return tuple(grids)


@cpu_kernel("GatherElements", since=11)
def gather_elements(node: KernelNode) -> KernelFn:
    axis = node.attr("axis", 0)

    def run(x: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray]:
        a = index_axis(node, axis, x.ndim)
        return (x[element_index(node, np.asarray(indices), a, x.shape)],)

    return run


def nd_index(
    node: KernelNode, data_shape: tuple[int, ...], indices: np.ndarray, b: int
) -> tuple[Any, ...]:
    """GatherND/ScatterND: an advanced index into data reshaped to (B, *data_shape[b:])."""
    k, nb, n = nd_index_shape(node, data_shape, indices.shape, b)
    idx = checked_indices(node, indices, np.array(data_shape[b : b + k], dtype=np.int64))
    ii = idx.reshape(nb, n, k)
    return (np.arange(nb)[:, None], *tuple(ii[..., j] for j in range(k)))


@cpu_kernel("GatherND", since=11)
def gather_nd(node: KernelNode) -> KernelFn:
    b = node.attr("batch_dims", 0)

    def run(x: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray]:
        indices = np.asarray(indices)
        index = nd_index(node, x.shape, indices, b)
        k = indices.shape[-1]
        flat = x.reshape((math.prod(x.shape[:b]), *x.shape[b:]))
        return (flat[index].reshape(indices.shape[:-1] + x.shape[b + k :]),)

    return run


# --------------------------------------------------------------------------------------------
# Scatters


def _write(out: np.ndarray, index: Any, values: np.ndarray, reduce: Any) -> None:
    """Scatter `values` into `out` in place: assign, or fold in with the reduction's
    `ufunc.at` (which, unlike `+=`, accumulates repeated indices)."""
    if reduce is None:
        out[index] = values
    else:
        reduce.at(out, index, values)


def _scatter_elements(node: KernelNode, axis: int, reduce: Any) -> KernelFn:
    def run(x: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> tuple[np.ndarray]:
        a = index_axis(node, axis, x.ndim)
        indices = np.asarray(indices)
        check_element_indices(node, indices.shape, x.shape, a, updates.shape)
        index = element_index(node, indices, a, x.shape)
        out = x.copy()
        _write(out, index, updates, reduce)
        return (out,)

    return run


@cpu_kernel("Scatter", since=9)
def scatter(node: KernelNode) -> KernelFn:
    """The deprecated opset 9-10 spelling of ScatterElements (no reduction)."""
    return _scatter_elements(node, node.attr("axis", 0), None)


@cpu_kernel("ScatterElements", since=11)
def scatter_elements(node: KernelNode) -> KernelFn:
    return _scatter_elements(node, node.attr("axis", 0), _reduction(node))


@cpu_kernel("ScatterND", since=11)
def scatter_nd(node: KernelNode) -> KernelFn:
    reduce = _reduction(node)

    def run(x: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> tuple[np.ndarray]:
        indices = np.asarray(indices)
        index = nd_index(node, x.shape, indices, 0)
        check_scatter_nd_updates(node, x.shape, indices.shape, updates.shape)
        k = indices.shape[-1]
        out = x.copy()
        flat = out.reshape((1, *x.shape))  # a view: writes land in `out`
        upd = updates.reshape((1, math.prod(indices.shape[:-1]), *x.shape[k:]))
        _write(flat, index, upd, reduce)
        return (out,)

    return run
