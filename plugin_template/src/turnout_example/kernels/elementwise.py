"""Elementwise kernels: Add and Relu on float32.

`dtypes={"T": FLOAT32}` constrains the op schema's type parameter T: a node of another element
type is declined with a reason ("dtype double of 'x' not supported for T") and runs elsewhere.
A kernel registered with `since=N` serves the op's schema versions from N on (until the next
registration for that op), so Add since 7 covers opsets 7 to today.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from turnout.sdk.ep import KernelFn, KernelNode

from . import CALLS, KERNELS

__all__ = ["FUSABLE"]

FLOAT32 = {TensorProto.FLOAT}

FUSABLE = frozenset({"Add", "Relu"})
"""Op types that `fused.find_fused_groups` may merge into one compiled group."""


@KERNELS.register("Add", since=7, dtypes={"T": FLOAT32})
def add(node: KernelNode) -> KernelFn:
    """Add with numpy (multidirectional) broadcasting, which is ONNX's rule since opset 7."""

    def run(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        CALLS["Add"] += 1
        return (np.add(a, b),)

    return run


@KERNELS.register("Relu", since=6, dtypes={"T": FLOAT32})
def relu(node: KernelNode) -> KernelFn:
    """max(x, 0); NaN stays NaN, as in ONNX. The output buffer comes from the provider's
    allocator (`ctx.allocate`), which gets it back when the plan says it is dead."""
    ctx = node.context  # None when a kernel is built outside a session

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        CALLS["Relu"] += 1
        out = ctx.allocate(x.shape, x.dtype) if ctx is not None else None
        return (np.maximum(x, x.dtype.type(0), out=out),)

    return run
