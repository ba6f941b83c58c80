"""The provider's kernel table and the one decorator every kernel module uses.

A kernel is a *builder* `build(kn, be) -> fn`: called once per node at session creation with the
node and the session's `Backend`, it returns `fn(*inputs) -> tuple`. Builders use `be.xp`
(CuPy, or numpy in the emulated tests), never a module imported by name. `applies(kn)` returns
the reason to decline a node (a dtype CuPy has no type for, an attribute the kernel lacks).

    @cuda_kernel("Softmax", since=13)
    def softmax(kn: KernelNode, be: Backend) -> KernelFn: ...
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from turnout.sdk.ep import KernelFn, KernelNode, KernelTable

from ..backend import Backend

__all__ = [
    "TABLE",
    "Applies",
    "Builder",
    "cuda_kernel",
    "float_only",
    "numeric_only",
]

Applies = Callable[[KernelNode], "str | None"]
Builder = Callable[[KernelNode, Backend], KernelFn]

# numpy dtype kinds CuPy holds: bool, ints, unsigned ints, floats (16/32/64), complex
_HELD_KINDS = frozenset("biufc")
_NOT_HELD = ("bfloat16", "float8", "float4", "int4", "uint4", "int2", "uint2")  # ml_dtypes


def numeric_only(kn: KernelNode) -> str | None:
    """Decline values CuPy has no dtype for (strings, bfloat16, float8, int4), or whose type
    is unknown at session creation."""
    for info in (*kn.inputs, *kn.outputs):
        if info is None or not info.name:
            continue
        if info.kind not in ("tensor", "unknown"):
            return f"{info.name!r} is a {info.kind}, not a tensor"
        dt = info.dtype
        if dt is None:
            return f"type of {info.name!r} unknown at session creation"
        if np.dtype(dt).kind not in _HELD_KINDS or np.dtype(dt).name.startswith(_NOT_HELD):
            return f"CuPy has no {np.dtype(dt).name} arrays ({info.name!r})"
    return None


def float_only(kn: KernelNode) -> str | None:
    """`numeric_only`, and the first input a floating-point tensor."""
    why = numeric_only(kn)
    first = kn.inputs[0] if kn.inputs else None
    if why is None and first is not None and np.dtype(first.dtype).kind != "f":
        return f"{kn.op_type} runs on float tensors here, not {np.dtype(first.dtype)}"
    return why


TABLE = KernelTable("CuPyExecutionProvider", runtime=True)
"""Every CuPy kernel; a session binds it to its `Backend` (CuPy on a device, or numpy)."""


def cuda_kernel(
    op_type: str,
    since: int = 1,
    *,
    domain: str = "",
    until: int | None = None,
    applies: Applies = numeric_only,
    host_inputs: tuple[int, ...] = (),
    host_outputs: tuple[int, ...] = (),
) -> Callable[[Builder], Builder]:
    """Register `build` for `op_type` from opset `since`; stack it for several ops. Inputs in
    `host_inputs` (shape-like: Reshape's shape, Slice's starts) stay in host memory."""

    def deco(build: Builder) -> Builder:
        def supports(kn: KernelNode, backend: Backend) -> str | None:
            return applies(kn)  # what a kernel applies to does not depend on the device

        TABLE.register(
            op_type,
            since,
            domain=domain,
            until=until,
            supports=supports,
            host_inputs=host_inputs,
            host_outputs=host_outputs,
        )(build)
        return build

    return deco
