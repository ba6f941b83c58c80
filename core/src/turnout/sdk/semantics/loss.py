"""Input shapes of the loss ops (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss).

One check, so that a target or weight of the wrong shape is the same InvalidArgument on every
provider, and the weighting and reduction of the picked log-probabilities, on any array module.
"""

from __future__ import annotations

from typing import Any

from turnout.graph.errors import InvalidArgument

__all__ = ["check_loss_shapes", "weigh_and_reduce"]


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


def weigh_and_reduce(
    xp: Any,
    picked: Any,
    ignored: Any,
    weight: Any | None,
    target: Any,
    has_ignore: bool,
    reduction: str,
) -> Any:
    """The loss from `picked` (N, D) log-probabilities of the targets: negated, weighed by the
    gathered class weight (0 where `ignored`), reduced "none" (to the target's shape), "sum" or
    "mean" (over the sum of the weights when there is a weight or an ignore_index). `target`
    is the in-range class per element, `xp` numpy or CuPy."""
    zero = xp.zeros((), dtype=picked.dtype)
    loss = xp.where(ignored, zero, -picked)
    gw = None
    if weight is not None:
        gw = xp.where(ignored, zero, weight.astype(picked.dtype)[target])
    elif has_ignore:
        gw = (~ignored).astype(picked.dtype)
    if gw is not None:
        loss = loss * gw
    if reduction == "none":
        return loss
    if reduction == "sum":
        return xp.sum(loss)
    return xp.sum(loss) / xp.sum(gw) if gw is not None else xp.mean(loss)
