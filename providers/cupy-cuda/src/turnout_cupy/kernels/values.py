"""Constant and Dropout on `be.xp`.

Constant's value is decoded by `turnout.sdk.semantics.literal` (as on every provider) and copied
to the device once, at session creation. Dropout's ratio, mode and training mask come from
`turnout.sdk.semantics.dropout`.
"""

from __future__ import annotations

from typing import Any

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.dropout import DropoutMode
from turnout.sdk.semantics.literal import constant_attr_value

from ..backend import Backend
from .registry import cuda_kernel

__all__: list[str] = []


@cuda_kernel("Constant", 1)
def constant(kn: KernelNode, be: Backend) -> KernelFn:
    value = be.asarray(constant_attr_value(kn.name, kn.attrs))
    if be.emulated:  # shared by every run: a kernel writing into it fails the tests
        value.setflags(write=False)
    return lambda: (value,)


@cuda_kernel("Dropout", 1, host_inputs=(1, 2))
def dropout(kn: KernelNode, be: Backend) -> KernelFn:
    """The identity and an all-true mask at inference. In training mode the mask is drawn on
    the host by `turnout.sdk.semantics.dropout` (numpy's generator: a seeded node gives the same
    mask as on every provider) and copied to the device, one copy per run."""
    mode = DropoutMode(kn)
    n_out = len(kn.node.outputs)

    def run(x: Any, ratio: Any = None, training: Any = None) -> tuple[Any, ...]:
        return mode.apply(be.xp, x, ratio, training, be.asarray)[:n_out]

    return run
