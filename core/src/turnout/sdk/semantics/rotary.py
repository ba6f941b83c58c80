"""What a RotaryEmbedding node (ai.onnx 23) means: its sizes and input checks.

X is (batch, heads, seq, head) or, with `num_heads`, (batch, seq, heads * head); the first
`rotary_embedding_dim` (0: all) of each head's dimensions rotate in pairs, (k, k + half) or,
interleaved, (2k, 2k + 1), by cos/sin rows picked by position_ids (a 2-D cache) or given per
(batch, seq) (a 3-D cache). Providers compute the rotation; the shapes and the errors for a
malformed node are these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnout.graph.errors import InvalidArgument

__all__ = ["RotaryShapes", "rotary_shapes"]


@dataclass(frozen=True)
class RotaryShapes:
    """Sizes of a run: X as (batch, seq, heads, head); `rot` rotated dims, `half` = rot / 2;
    `positions` the rows of a 2-D cache that position_ids may pick (None for a 3-D cache)."""

    batch: int
    seq: int
    heads: int
    head: int
    rot: int
    half: int
    positions: int | None


def _shape(v: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in v)


def rotary_shapes(
    name: str,
    x: Any,
    cos: Any,
    sin: Any,
    position_ids: Any | None,
    num_heads: int,
    rotary_dim: int,
) -> RotaryShapes:
    """Check the shapes (tuples of ints) of a RotaryEmbedding run and return its sizes."""
    x, cos, sin = _shape(x), _shape(cos), _shape(sin)
    if len(x) == 4:
        nb, nh, ns, nd = x
    elif len(x) == 3:
        if num_heads <= 0 or x[2] % num_heads:
            raise InvalidArgument(
                f"{name}: a 3-D input needs num_heads dividing its hidden size {x[2]}"
            )
        nb, ns, nh, nd = x[0], x[1], num_heads, x[2] // num_heads
    else:
        raise InvalidArgument(f"{name}: input must be 3-D or 4-D, got shape {x}")
    rot = rotary_dim or nd
    if rot > nd or rot % 2:
        raise InvalidArgument(
            f"{name}: rotary_embedding_dim {rot} must be even and at most head size {nd}"
        )
    half = rot // 2
    positions = None
    if position_ids is not None:
        pos = _shape(position_ids)
        if pos != (nb, ns) or len(cos) != 2 or len(sin) != 2:
            raise InvalidArgument(
                f"{name}: position_ids {pos} must be {(nb, ns)} and the caches 2-D, "
                f"got {cos} and {sin}"
            )
        positions = min(cos[0], sin[0])
    else:
        if len(cos) != 3 or len(sin) != 3:
            raise InvalidArgument(
                f"{name}: without position_ids the caches are (batch, seq, {half}), "
                f"got {cos} and {sin}"
            )
    for what, c in (("cos_cache", cos), ("sin_cache", sin)):
        fits = c[-1] == half and (positions is not None or _fits(c, (nb, ns)))
        if not fits:
            raise InvalidArgument(
                f"{name}: {what} has shape {c}; its last dimension must be "
                f"rotary_embedding_dim / 2 = {half} and it must fit (batch, seq) = {(nb, ns)}"
            )
    return RotaryShapes(nb, ns, nh, nd, rot, half, positions)


def _fits(c: tuple[int, ...], lead: tuple[int, int]) -> bool:
    """A 3-D cache's (batch, seq) broadcast to `lead`."""
    return all(a in (1, b) for a, b in zip(c[:2], lead, strict=True))
