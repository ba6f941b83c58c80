"""What a TensorScatter node (ai.onnx 24) means: a cache update's axis, mode and checks.

`update` is written into a copy of `past_cache` along `axis` (default -2, never the batch
axis) starting, per batch entry, at write_indices[b] (absent: 0); mode `linear` must fit in
the cache (the run fails otherwise), `circular` wraps around its length. All other
dimensions of the two match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode

__all__ = ["TensorScatterPlan", "tensor_scatter_plan", "tensor_scatter_mode"]


def tensor_scatter_mode(node: KernelNode) -> str:
    mode = node.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("linear", "circular"):
        raise InvalidArgument(f"{node.name}: unknown mode {mode!r}, expected linear or circular")
    return mode


@dataclass(frozen=True)
class TensorScatterPlan:
    axis: int
    cache_len: int
    update_len: int


def tensor_scatter_plan(
    name: str, cache: Any, update: Any, write_indices: Any | None, axis: int
) -> TensorScatterPlan:
    """Check the shapes (tuples of ints; None for absent write_indices)."""
    cache, update = tuple(cache), tuple(update)
    r = len(cache)
    if r < 2 or len(update) != r or not -r <= axis < r or axis % r == 0:
        raise InvalidArgument(
            f"{name}: past_cache {cache} and update {update} need one rank of at least 2 and an "
            f"axis {axis} past the batch axis"
        )
    ax = axis % r
    same = all(c == u for i, (c, u) in enumerate(zip(cache, update, strict=True)) if i != ax)
    if not same or update[ax] > cache[ax]:
        raise InvalidArgument(
            f"{name}: update {update} does not fit past_cache {cache} along axis {ax}"
        )
    if write_indices is not None and tuple(write_indices) != (cache[0],):
        raise InvalidArgument(
            f"{name}: write_indices {tuple(write_indices)} must hold one index per batch "
            f"entry ({cache[0]})"
        )
    return TensorScatterPlan(ax, cache[ax], update[ax])
