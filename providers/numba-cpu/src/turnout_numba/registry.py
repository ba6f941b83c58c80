"""The numba provider's kernel table and the decorator every kernel module uses.

A numba kernel is registered with `applies(kn) -> reason | None` (can this node be compiled
here: dtypes, ranks, attributes known at session creation?) and a builder `build(kn, ctx)` that
compiles at once and returns the kernel function. A node the numba kernel does not apply to
may still run on this provider through turnout's numpy kernel for it (see `kernels/numpy_ops`);
the partition report says which (source "numba" or "numpy").

    @numba_kernel("Softmax", since=13, applies=softmax_applies)
    def softmax(kn: KernelNode, ctx: BuildContext) -> KernelFn: ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu import numpy_kernels
from turnout.sdk.ep import KernelFn, KernelNode, KernelTable

from . import cache
from .codegen import SERIAL_WORK, compute_dtype

__all__ = [
    "TABLE",
    "SERIAL_WORK",
    "BuildContext",
    "SizedKernel",
    "float_inputs_applies",
    "numba_kernel",
    "numpy_kernel",
    "serves_op",
]


class SizedKernel:
    """A kernel compiled serial and (when the session has threads) parallel; each call picks
    by the work it is given (elements touched, roughly): `kernel(work, *args)`. Below
    `SERIAL_WORK` a parallel launch costs more than it saves, and on a busy machine a launch
    waits for every worker thread to be scheduled."""

    def __init__(
        self,
        pyfunc: Callable[..., Any],
        sigs: Sequence[Any],
        parallel: bool,
        *,
        contract: bool = False,
        reassoc: bool = False,
    ) -> None:
        self.serial = cache.jit(pyfunc, sigs, parallel=False, contract=contract, reassoc=reassoc)
        self.parallel = (
            cache.jit(pyfunc, sigs, parallel=True, contract=contract, reassoc=reassoc)
            if parallel
            else self.serial
        )

    def __call__(self, work: int, *args: Any) -> Any:
        return (self.parallel if work >= SERIAL_WORK else self.serial)(*args)


@dataclass(frozen=True)
class BuildContext:
    """Per-session settings a kernel builder needs: whether to compile parallel loops, and
    the set that collects the generated modules the session's kernels come from (its
    compiled model's blobs)."""

    parallel: bool = True
    modules: set[str] = field(default_factory=set, compare=False)

    def jit(
        self,
        pyfunc: Callable[..., Any],
        sigs: Sequence[Any],
        *,
        contract: bool = False,
        reassoc: bool = False,
    ) -> SizedKernel:
        """Compile `pyfunc` for this session: serial, plus parallel when threads > 1
        (`contract`: FMAs allowed, for kernels evaluating `vecmath` expansions; `reassoc`:
        sums reordered too, for dot products, `cache.jit`)."""
        return SizedKernel(pyfunc, sigs, self.parallel, contract=contract, reassoc=reassoc)


Applies = Callable[[KernelNode], "str | None"]
Builder = Callable[[KernelNode, BuildContext], KernelFn]


TABLE = KernelTable("NumbaExecutionProvider", runtime=True)
"""Every numba kernel; a session binds it to its `BuildContext`."""


def numba_kernel(
    op_type: str,
    since: int = 1,
    *,
    domain: str = "",
    until: int | None = None,
    applies: Applies | None = None,
) -> Callable[[Builder], Builder]:
    """Decorator: register a numba kernel builder for `op_type` from opset `since`."""
    check = applies or _always

    def deco(build: Builder) -> Builder:
        def supports(kn: KernelNode, ctx: BuildContext) -> str | None:
            return check(kn)  # whether numba compiles a node does not depend on the session

        def factory(kn: KernelNode, ctx: BuildContext) -> KernelFn:
            with cache.recording(ctx.modules):
                return build(kn, ctx)

        TABLE.register(op_type, since, domain=domain, until=until, supports=supports)(factory)
        return build

    return deco


def float_inputs_applies(kn: KernelNode, count: int = 1, *, narrow: bool = True) -> str | None:
    """None when the first `count` inputs have float types known at session creation, else
    why not (the node then runs on the numpy kernel). float16/bfloat16 count when `narrow`
    (they compute in float32); otherwise only float32/float64 do."""
    for i, info in enumerate(kn.inputs[:count]):
        if info is None or info.elem_type is None:
            return f"type of input {i} unknown at session creation"
        c = compute_dtype(info.dtype) if narrow else info.dtype
        if c is None or c.name not in ("float32", "float64"):
            return f"{kn.op_type} on {info.dtype} is not compiled by numba"
    return None


def _always(kn: KernelNode) -> str | None:
    return None


def numpy_kernel(kn: KernelNode) -> KernelFn:
    """The CPU provider's numpy kernel for this node, for the cases a numba kernel leaves to
    it (empty reductions, small convs, shapes Concat cannot join); InvalidArgument with the
    numpy registry's reason where it has none."""
    kdef, reason = numpy_kernels().match(kn)
    if kdef is None:
        raise InvalidArgument(f"{kn.name}: {reason}")
    return kdef.factory(kn)


def serves_op(domain: str, op_type: str, since_version: int) -> bool:
    """Whether the numba provider runs `domain::op_type` at all: with a numba kernel, or with
    the numpy kernel it claims where it has none (what the optimizer asks before a fusion)."""
    if TABLE.lookup(domain, op_type, since_version) is not None:
        return True
    return numpy_kernels().lookup(domain, op_type, since_version) is not None
