"""Input checks of the indexed ops (GatherElements, GatherND, Scatter, ScatterElements,
ScatterND): axis, reduction, and how the indices' and updates' shapes must fit the data.

Every provider checks a node's shapes here before it reads an index, so a misshapen indices or
updates tensor is the same `InvalidArgument` whichever provider runs the node. The values of the
indices are checked by each provider where they live (on the host, or on the device).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics.shape import norm_axis

index_axis = norm_axis
"""`axis` counted from 0; one outside [-rank, rank) raises (`shape.norm_axis`)."""

__all__ = [
    "SCATTER_REDUCTIONS",
    "NdIndexShape",
    "check_element_indices",
    "check_scatter_nd_updates",
    "index_axis",
    "nd_index_shape",
    "reverse_sequence_axes",
    "scatter_reduction",
]

SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")
"""The `reduction` values of ScatterElements (16, 18) and ScatterND (16, 18)."""


def _bad(node: KernelNode, msg: str) -> InvalidArgument:
    return InvalidArgument(f"{node.name}: {msg}")


def scatter_reduction(node: KernelNode) -> str | None:
    """The node's `reduction` ("add", "mul", "max", "min"), None for plain assignment."""
    r = node.attr("reduction", "none")
    if isinstance(r, bytes):
        r = r.decode()
    if r not in SCATTER_REDUCTIONS:
        raise _bad(node, f"unknown reduction {r!r}")
    return None if r == "none" else str(r)


def check_element_indices(
    node: KernelNode,
    idx_shape: Sequence[int],
    data_shape: Sequence[int],
    axis: int,
    updates_shape: Sequence[int] | None = None,
) -> None:
    """GatherElements/ScatterElements: indices of the data's rank, no larger than the data on
    any axis but `axis`; a scatter's updates shaped as the indices."""
    if updates_shape is not None and tuple(updates_shape) != tuple(idx_shape):
        raise _bad(
            node, f"indices shape {tuple(idx_shape)} differs from updates {tuple(updates_shape)}"
        )
    if len(idx_shape) != len(data_shape):
        raise _bad(node, f"indices rank {len(idx_shape)} differs from data rank {len(data_shape)}")
    for i, (n, d) in enumerate(zip(idx_shape, data_shape)):
        if i != axis and n > d:
            raise _bad(
                node,
                f"indices shape {tuple(idx_shape)} exceeds data shape {tuple(data_shape)} "
                f"on axis {i}",
            )


class NdIndexShape(NamedTuple):
    """How GatherND/ScatterND indices address the data: each index row names `k` data axes
    after the batch axes; the data has `batches` batches, each read by `rows` index rows."""

    k: int
    batches: int
    rows: int


def nd_index_shape(
    node: KernelNode, data_shape: Sequence[int], idx_shape: Sequence[int], batch_dims: int
) -> NdIndexShape:
    """GatherND/ScatterND: check the indices fit the data (their last axis addresses 1 to
    rank - batch_dims data axes; the batch axes agree) and say how they index it."""
    data_shape, idx_shape = tuple(data_shape), tuple(idx_shape)
    b = batch_dims
    k = idx_shape[-1] if idx_shape else 0
    if not idx_shape or not 1 <= k <= len(data_shape) - b:
        raise _bad(node, f"indices shape {idx_shape} does not fit data shape {data_shape}")
    if idx_shape[:b] != data_shape[:b]:
        raise _bad(node, f"batch dims of indices {idx_shape} and data {data_shape} differ")
    return NdIndexShape(k, math.prod(data_shape[:b]), math.prod(idx_shape[b:-1]))


def check_scatter_nd_updates(
    node: KernelNode,
    data_shape: Sequence[int],
    idx_shape: Sequence[int],
    updates_shape: Sequence[int],
) -> None:
    """ScatterND's updates are shaped indices.shape[:-1] + data.shape[k:]."""
    k = idx_shape[-1]
    want = tuple(idx_shape[:-1]) + tuple(data_shape[k:])
    if tuple(updates_shape) != want:
        raise _bad(node, f"updates shape {tuple(updates_shape)} should be {want}")


def reverse_sequence_axes(
    node: KernelNode, shape: Sequence[int], lens_shape: Sequence[int]
) -> tuple[int, int]:
    """ReverseSequence's (time_axis, batch_axis), 0 and 1 in some order, with sequence_lens
    one length per batch entry. The lengths' values (0 .. time steps) are checked where they
    live."""
    time_axis = int(node.attr("time_axis", 0))
    batch_axis = int(node.attr("batch_axis", 1))
    if {batch_axis, time_axis} != {0, 1} or len(shape) < 2:
        raise _bad(node, "batch_axis and time_axis must be 0 and 1 in some order")
    if tuple(lens_shape) != (shape[batch_axis],):
        raise _bad(
            node, f"sequence_lens shape {tuple(lens_shape)} should be ({shape[batch_axis]},)"
        )
    return time_axis, batch_axis
