"""Einsum's equation and Det's input check, shared so every provider rejects the same nodes."""

from __future__ import annotations

from collections.abc import Sequence

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode

__all__ = ["check_square", "einsum_equation"]


def einsum_equation(node: KernelNode) -> str:
    """The equation without spaces; an empty one raises."""
    eq = node.attr("equation", "")
    eq = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")
    if not eq:
        raise InvalidArgument(f"{node.name}: Einsum needs a non-empty equation")
    return eq


def check_square(node: KernelNode, shape: Sequence[int]) -> None:
    """Det takes (..., M, M)."""
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise InvalidArgument(f"{node.name}: Det needs square matrices, got shape {tuple(shape)}")
