"""The OpenCL kernel registry: `@ocl_kernel(op, since=...)` on a builder `(KernelNode, Runtime)
-> KernelFn`, plus the dtype groups and checks every kernel shares.

A builder runs once per node at session creation: it generates the OpenCL C source, builds the
program (through the runtime's program cache) and returns the run function, which only
computes shapes on the host and enqueues kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout.provider import KernelFn, KernelNode

from ..runtime import Runtime

__all__ = [
    "ALL",
    "FLOATS",
    "INTS",
    "NUM",
    "SPECS",
    "KernelSpec",
    "dtype_in",
    "dtype_out",
    "ocl_kernel",
]

Builder = Callable[[KernelNode, Runtime], KernelFn]
Supports = Callable[[KernelNode, Runtime], "str | None"]

BOOL = frozenset({np.dtype(np.bool_)})
FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))
SINTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
UINTS = frozenset(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
INTS = SINTS | UINTS
NUM = FLOATS | INTS
ALL = NUM | BOOL
INDEX = frozenset({np.dtype(np.int32), np.dtype(np.int64)})


@dataclass(frozen=True)
class KernelSpec:
    """One OpenCL kernel: op, opset range, builder, dtype limits and host-memory inputs/outputs.

    `dtypes` limits the dtype of input 0 (or of `dtype_of`); every other present input and
    output only has to be a type the device can hold.
    """

    op_type: str
    domain: str
    since: int
    until: int | None
    build: Builder
    dtypes: frozenset[np.dtype[Any]]
    supports: Supports | None
    host_inputs: tuple[int, ...]
    host_outputs: tuple[int, ...]
    dtype_of: tuple[int, ...]

    def applies(self, kn: KernelNode, rt: Runtime) -> str | None:
        """None when this kernel runs `kn` on `rt`'s device, else the reason."""
        for i, info in enumerate(kn.inputs):
            if info is None or i in self.host_inputs:
                continue
            if info.kind not in ("tensor", "unknown"):
                return f"input {info.name!r} is a {info.kind}, not a tensor"
            why = rt.type_problem(info.elem_type)
            if why:
                return f"input {info.name!r}: {why}"
        for j, info in enumerate(kn.outputs):
            if info is None or j in self.host_outputs:
                continue
            if info.kind not in ("tensor", "unknown"):
                return f"output {info.name!r} is a {info.kind}, not a tensor"
            why = rt.type_problem(info.elem_type)
            if why:
                return f"output {info.name!r}: {why}"
        for i in self.dtype_of:
            info = kn.inputs[i] if i < len(kn.inputs) else None
            if info is not None and info.dtype not in self.dtypes:
                return f"dtype {info.dtype} of {info.name!r} not supported by the OpenCL kernel"
        if self.supports is not None:
            return self.supports(kn, rt)
        return None


SPECS: list[KernelSpec] = []


def ocl_kernel(
    op_type: str,
    since: int = 1,
    *,
    domain: str = "",
    until: int | None = None,
    dtypes: Iterable[np.dtype[Any]] = ALL,
    supports: Supports | None = None,
    host_inputs: tuple[int, ...] = (),
    host_outputs: tuple[int, ...] = (),
    dtype_of: tuple[int, ...] = (0,),
) -> Callable[[Builder], Builder]:
    """Register an OpenCL kernel builder for `op_type` from schema version `since`."""

    def deco(build: Builder) -> Builder:
        SPECS.append(
            KernelSpec(
                op_type,
                domain,
                since,
                until,
                build,
                frozenset(dtypes),
                supports,
                host_inputs,
                host_outputs,
                dtype_of,
            )
        )
        return build

    return deco


def dtype_in(kn: KernelNode, i: int) -> np.dtype[Any]:
    info = kn.inputs[i]
    assert info is not None and info.dtype is not None
    return info.dtype


def dtype_out(kn: KernelNode, j: int = 0) -> np.dtype[Any]:
    info = kn.outputs[j]
    assert info is not None and info.dtype is not None
    return info.dtype


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    from turnout.errors import InvalidArgument

    if not -rank <= axis < max(rank, 1):
        raise InvalidArgument(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def host_ints(x: Any) -> list[int]:
    """A host tensor of ints (a shape-like input) as a list."""
    return [int(v) for v in np.asarray(x).reshape(-1)]
