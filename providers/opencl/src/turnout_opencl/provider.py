"""OpenCLExecutionProvider: OpenCL C kernels on one device, one context and queue per session.

`get_capability` claims each node an OpenCL kernel applies to (its dtypes known at session
creation and held by the device: float64 needs cl_khr_fp64; float16/bfloat16 are 16-bit
storage computed in float, no extension needed) and declines
the rest with the reason; then connected elementwise nodes become fused groups
(`fusion.find_groups`), which turnout hands back to `compile_subgraphs` as `FusedSubgraph`s
(nodes, typed boundary): each becomes one generated kernel in a `CompiledState`. Every program
is built while the session is created; a run only enqueues kernels, and `on_run_end` waits for
the queue.

Threads: runs of one session share its device state, and that state is not safe to use from
two threads at once: a `cl.Kernel` takes its arguments (`clSetKernelArg`) separately from the
launch, so two threads launching the same kernel can swap arguments (wrong outputs, reads of
freed buffers), and the buffer pool, the error flags and the small caches are unlocked. So
`on_run_start` takes the runtime's `run_lock` and `on_run_end` releases it: concurrent
`run()` calls on one session take turns on the device. That costs little: the session's
in-order queue runs one kernel at a time anyway, and each kernel already spreads over the
device (PoCL: over every core); only host-side work between kernels stops overlapping. For
runs truly in parallel, use a session per thread (each has its own context and queue).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from turnout.graph.ir import GraphView
from turnout.sdk.provider import (
    Capability,
    CompiledState,
    ExecutionProvider,
    FusedSubgraph,
    KernelFn,
    ProviderFactory,
)

from . import kernels as _kernels  # noqa: F401 - importing registers every kernel module
from .data_transfer import OpenCLDataTransfer
from .fusion import compile_group, find_groups
from .kernels.base import TABLE
from .runtime import Runtime

__all__ = ["OpenCLExecutionProvider"]


class OpenCLExecutionProvider(ExecutionProvider):
    compiles = True

    def __init__(
        self,
        options: Mapping[str, Any] | None,
        cl_device: Any,
        index: int,
        factory: ProviderFactory,
    ) -> None:
        super().__init__(options, factory, index)  # name and device: the factory's
        self.rt = Runtime(cl_device, index, self.device)
        self.allocator = self.rt.allocator
        self.data_transfer = OpenCLDataTransfer(self.rt.allocator)
        self.stream = self.rt.stream
        self.kernels = TABLE.bind(self.rt, self.name)

    def fused_groups(
        self, graph: GraphView, claims: Sequence[Capability]
    ) -> dict[str, Sequence[str]]:
        """Connected elementwise nodes among the claims, each group one generated kernel."""
        groups = find_groups(graph, [c.nodes[0] for c in claims])
        return {f"opencl_fused_{k}_{members[0]}": members for k, members in enumerate(groups)}

    def compile_subgraphs(self, subgraphs: Sequence[FusedSubgraph]) -> list[CompiledState]:
        """One generated kernel per group, its program built now (or read from the program
        cache); the state is the kernel function, and the cache owns the programs."""
        out: list[CompiledState] = []
        for sg in subgraphs:
            fn = compile_group(self.rt, sg)
            inputs = tuple(v.name for v in sg.inputs)
            outputs = tuple(v.name for v in sg.outputs)
            out.append(CompiledState(sg.name, inputs, outputs, _compute, create=_holding(fn)))
        return out

    # ------------------------------------------------------------------ runs
    def on_run_start(self) -> None:
        """Take the device for this run (released in `on_run_end`): runs take turns."""
        self.rt.run_lock.acquire()

    def on_run_end(self) -> None:
        """Wait for the run's kernels, raise a flagged device error, and give the device back."""
        try:
            self.rt.finish()
            self.rt.check_errors()
        finally:
            self.rt.run_lock.release()


def _holding(fn: KernelFn) -> Callable[[], KernelFn]:
    """A group's create: the state it makes is its kernel function, built already."""
    return lambda: fn


def _compute(fn: KernelFn, *inputs: Any) -> tuple[Any, ...]:
    """A group's compute: its state is the group's kernel function."""
    return fn(*inputs)  # type: ignore[return-value]
