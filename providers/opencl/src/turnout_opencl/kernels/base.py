"""The OpenCL kernel registry: `@ocl_kernel(op, since=...)` on a builder `(KernelNode, Runtime)
-> KernelFn`, plus the dtype groups and checks every kernel shares.

A builder runs once per node at session creation: it generates the OpenCL C source, builds the
program (through the runtime's program cache) and returns the run function, which only
computes shapes on the host and enqueues kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from turnout.sdk.ep import KernelFn, KernelNode, KernelTable

from ..runtime import BF16, HALFS, Runtime

__all__ = [
    "ALL",
    "FLOATS",
    "INTS",
    "NUM",
    "TABLE",
    "KernelSpec",
    "dtype_in",
    "dtype_out",
    "ocl_kernel",
]

Builder = Callable[[KernelNode, Runtime], KernelFn]
Supports = Callable[[KernelNode, Runtime], "str | None"]

BOOL = frozenset({np.dtype(np.bool_)})
FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64)) | {BF16}
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
    output only has to be a type the device can hold. `half` says how float16/bfloat16 values
    are handled: "native" (the kernel loads/stores them itself), "bits" (it only moves bits),
    "wrap" (the float32 kernel runs between device conversions) or "no" (declined).
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
    half: str = "wrap"

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
        if self.half == "no" and _has_half(kn, self.host_inputs, self.host_outputs):
            return f"{kn.op_type}: no float16/bfloat16 kernel (not even through float32)"
        if self.supports is not None:
            return self.supports(
                _FloatView(kn, self.host_inputs, self.host_outputs) if self.half == "wrap" else kn,
                rt,
            )
        return None

    def factory(self, kn: KernelNode, rt: Runtime) -> KernelFn:
        """The run function for `kn`; 16-bit floats of a "wrap" kernel go through float32."""
        if self.half != "wrap" or not _has_half(kn, self.host_inputs, self.host_outputs):
            return self.build(kn, rt)
        view = _FloatView(kn, self.host_inputs, self.host_outputs)
        inner = self.build(view, rt)
        rt.half_kernels()  # built now, not in the first run
        wide_in = [
            i not in self.host_inputs and info is not None and info.dtype in HALFS
            for i, info in enumerate(kn.inputs)
        ]
        narrow_out: list[np.dtype[Any] | None] = [
            info.dtype
            if j not in self.host_outputs and info is not None and info.dtype in HALFS
            else None
            for j, info in enumerate(kn.outputs)
        ]

        def run(*xs: Any) -> tuple[Any, ...]:
            ys = [
                rt.widen(x) if x is not None and k < len(wide_in) and wide_in[k] else x
                for k, x in enumerate(xs)
            ]
            outs = inner(*ys)
            return tuple(_narrow(o, narrow_out[j]) for j, o in enumerate(outs))

        def _narrow(o: Any, dt: np.dtype[Any] | None) -> Any:
            return o if o is None or dt is None else rt.narrow(o, dt)

        return run


def _has_half(kn: KernelNode, host_in: tuple[int, ...], host_out: tuple[int, ...]) -> bool:
    return any(
        info is not None and i not in host_in and info.dtype in HALFS
        for i, info in enumerate(kn.inputs)
    ) or any(
        info is not None and j not in host_out and info.dtype in HALFS
        for j, info in enumerate(kn.outputs)
    )


def _f32(info: Any) -> Any:
    if info is None or info.dtype not in HALFS:
        return info
    return dataclasses.replace(info, elem_type=TensorProto.FLOAT)


class _FloatView(KernelNode):
    """A node whose float16/bfloat16 device values read as float32 (for "wrap" kernels)."""

    __slots__ = ("_ins", "_outs")

    def __init__(self, kn: KernelNode, host_in: tuple[int, ...], host_out: tuple[int, ...]):
        super().__init__(kn.node, kn.opset, kn.since_version, kn.subgraph_builder, kn.context)
        self._ins = tuple(x if i in host_in else _f32(x) for i, x in enumerate(kn.inputs))
        self._outs = tuple(x if j in host_out else _f32(x) for j, x in enumerate(kn.outputs))

    @property
    def inputs(self) -> tuple[Any, ...]:
        return self._ins

    @property
    def outputs(self) -> tuple[Any, ...]:
        return self._outs


TABLE = KernelTable("OpenCLExecutionProvider", runtime=True)
"""Every OpenCL kernel; a session binds it to its `Runtime` (device, context, queue)."""


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
    half: str = "wrap",
) -> Callable[[Builder], Builder]:
    """Register an OpenCL kernel builder for `op_type` from schema version `since`."""

    def deco(build: Builder) -> Builder:
        spec = KernelSpec(
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
            half,
        )
        TABLE.register(
            op_type,
            since,
            domain=domain,
            until=until,
            supports=spec.applies,
            host_inputs=host_inputs,
            host_outputs=host_outputs,
        )(spec.factory)
        return build

    return deco


def dtype_in(kn: KernelNode, i: int) -> np.dtype[Any]:
    info = kn.inputs[i]
    assert info is not None and info.dtype is not None
    dt: np.dtype[Any] = info.dtype
    return dt


def dtype_out(kn: KernelNode, j: int = 0) -> np.dtype[Any]:
    info = kn.outputs[j]
    assert info is not None and info.dtype is not None
    dt: np.dtype[Any] = info.dtype
    return dt


def host_ints(x: Any) -> list[int]:
    """A host tensor of ints (a shape-like input) as a list."""
    return [int(v) for v in np.asarray(x).reshape(-1)]
