"""Attributes and checks of the window-free normalizations: LpNormalization,
MeanVarianceNormalization and LRN (its channel window).

Every provider decodes these nodes here, so an out-of-range axis or p is the same
`InvalidArgument` whichever provider runs the node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics.shape import norm_axis

__all__ = ["MVN_EPSILON", "LrnWindow", "lp_norm_attrs", "lrn_window", "mvn_axes"]

MVN_EPSILON = 1e-9
"""MeanVarianceNormalization divides by sqrt(variance) + this (the ONNX function body's)."""


def lp_norm_attrs(node: KernelNode, rank: int) -> tuple[int, int]:
    """LpNormalization's (p, axis counted from 0); p is 1 or 2."""
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise InvalidArgument(f"{node.name}: p must be 1 or 2, got {p}")
    return p, norm_axis(node, int(node.attr("axis", -1)), rank, scalar=True)


def mvn_axes(node: KernelNode, rank: int) -> tuple[int, ...]:
    """MeanVarianceNormalization's axes (default N, H, W), checked against the rank."""
    axes: Sequence[int] = node.attr("axes", None) or (0, 2, 3)
    return tuple(norm_axis(node, int(a), rank) for a in axes)


class LrnWindow(NamedTuple):
    """LRN sums squares over channels c - before .. c + after; y = x / (bias + alpha / size *
    sum) ** beta."""

    size: int
    before: int
    after: int
    alpha: float
    beta: float
    bias: float


def lrn_window(node: KernelNode, rank: int) -> LrnWindow:
    """LRN's channel window and coefficients; the input must be at least 3-D."""
    if rank < 3:
        raise InvalidArgument(f"{node.name}: input must be at least 3-D, got rank {rank}")
    size = int(node.attr("size"))
    return LrnWindow(
        size,
        (size - 1) // 2,
        -(-(size - 1) // 2),
        float(node.attr("alpha", 1e-4)),
        float(node.attr("beta", 0.75)),
        float(node.attr("bias", 1.0)),
    )
