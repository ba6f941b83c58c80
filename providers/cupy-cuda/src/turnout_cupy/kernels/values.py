"""Constant and Dropout (at inference) on `be.xp`.

Constant's value is decoded by `turnout.semantics.literal` (as on every provider) and copied
to the device once, at session creation. Dropout at inference is the identity and an all-true
mask; training mode, whose mask the ONNX tests fix by numpy's seeded generator on the host, is
declined with the reason, so it runs where that generator is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.provider import KernelFn, KernelNode
from turnout.semantics import constant_value
from turnout.semantics.literal import constant_attr_value

from ..backend import Backend
from .registry import cuda_kernel, numeric_only

__all__: list[str] = []


@cuda_kernel("Constant", 1)
def constant(kn: KernelNode, be: Backend) -> KernelFn:
    value = be.asarray(constant_attr_value(kn.name, kn.attrs))
    if be.emulated:  # shared by every run: a kernel writing into it fails the tests
        value.setflags(write=False)
    return lambda: (value,)


def _dropout_applies(kn: KernelNode) -> str | None:
    v = kn.since_version
    if v < 7 and not kn.attr("is_test", 0):
        return "Dropout in training mode (is_test=0) draws its mask on the host"
    if v >= 12 and len(kn.node.inputs) > 2 and kn.node.inputs[2]:
        training = constant_value(kn, 2)
        if training is None or bool(np.asarray(training)):
            return (
                "Dropout's training_mode is not a constant false: training mode draws its "
                "mask from numpy's seeded generator on the host"
            )
    return numeric_only(kn)


@cuda_kernel("Dropout", 1, applies=_dropout_applies, host_inputs=(1, 2))
def dropout(kn: KernelNode, be: Backend) -> KernelFn:
    """The identity; the mask is all true (bool from opset 10, the input's type before)."""
    n_out = len(kn.node.outputs)
    mask_bool = kn.since_version >= 10

    def run(x: Any, ratio: Any = None, training: Any = None) -> tuple[Any, ...]:
        if n_out == 1:
            return (x,)
        return (x, be.xp.ones(x.shape, dtype=bool if mask_bool else x.dtype))

    return run
