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

from collections.abc import Callable
from dataclasses import dataclass

from turnout.provider import KernelFn, KernelNode

__all__ = ["NUMBA_KERNELS", "BuildContext", "NumbaKernel", "lookup", "numba_kernel"]


@dataclass(frozen=True)
class BuildContext:
    """Per-session settings a kernel builder needs: whether to compile parallel loops."""

    parallel: bool = True


Applies = Callable[[KernelNode], "str | None"]
Builder = Callable[[KernelNode, BuildContext], KernelFn]


@dataclass(frozen=True)
class NumbaKernel:
    op_type: str
    domain: str
    since: int
    until: int | None
    applies: Applies
    build: Builder


NUMBA_KERNELS: dict[tuple[str, str], list[NumbaKernel]] = {}


def numba_kernel(
    op_type: str,
    since: int = 1,
    *,
    domain: str = "",
    until: int | None = None,
    applies: Applies | None = None,
) -> Callable[[Builder], Builder]:
    """Decorator: register a numba kernel builder for `op_type` from opset `since`."""

    def deco(build: Builder) -> Builder:
        defs = NUMBA_KERNELS.setdefault((domain, op_type), [])
        if any(d.since == since for d in defs):
            raise ValueError(f"numba kernel {op_type} since {since} registered twice")
        defs.append(NumbaKernel(op_type, domain, since, until, applies or _always, build))
        defs.sort(key=lambda d: d.since)
        return build

    return deco


def _always(kn: KernelNode) -> str | None:
    return None


def lookup(domain: str, op_type: str, since_version: int) -> NumbaKernel | None:
    """The kernel whose since is the highest not above the node's schema version."""
    best = None
    for d in NUMBA_KERNELS.get((domain, op_type), ()):
        if d.since <= since_version and (d.until is None or since_version <= d.until):
            best = d
    return best
