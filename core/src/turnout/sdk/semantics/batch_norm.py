"""Whether a BatchNormalization node runs in training mode, which its opset decides.

From opset 14 the `training_mode` attribute says so; opsets 7-13 train when the node asks
for more than Y (the running and saved statistics); before 7, when `is_test` is 0 and it asks
for them. In training mode the batch's mean and (population) variance normalize the input
and the running statistics move by `momentum` towards them.
"""

from __future__ import annotations

from turnout.sdk.provider import KernelNode

__all__ = ["batch_norm_training"]


def batch_norm_training(node: KernelNode) -> bool:
    n_out = len([o for o in node.node.outputs if o])
    if node.since_version >= 14:
        return bool(node.attr("training_mode", 0))
    if node.since_version >= 7:
        return n_out > 1
    return not node.attr("is_test", 0) and n_out > 1
