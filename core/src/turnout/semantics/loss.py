"""Input shapes of the loss ops (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss).

One check, so that a target or weight of the wrong shape is the same InvalidArgument on every
provider.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument

__all__ = ["check_loss_shapes"]


def check_loss_shapes(name: str, x: Any, target: Any, weight: Any | None) -> None:
    """The shapes a (softmax) cross-entropy or NLL loss node accepts, the same on every provider:
    input (N, C, D...), target (N, D...), optional weight (C,). Takes arrays of any kind (only
    their `shape` is read), so device arrays are checked in place."""
    xs = tuple(x.shape)
    if len(xs) < 2:
        raise InvalidArgument(f"{name}: input must have rank >= 2, got shape {xs}")
    want = (xs[0], *xs[2:])
    if tuple(target.shape) != want:
        raise InvalidArgument(
            f"{name}: target shape {tuple(target.shape)} does not match input shape {xs} "
            f"(expected {want})"
        )
    if weight is not None and tuple(weight.shape) != (xs[1],):
        raise InvalidArgument(f"{name}: weight shape {tuple(weight.shape)} is not ({xs[1]},)")
