"""CuPyExecutionProvider: ONNX nodes as CuPy calls (cuBLAS, CuPy's reductions) and generated
CUDA kernels on one device, on one stream per session.

`get_capability` claims each node a kernel in `kernels/` applies to and declines the rest with
the reason; then a LayerNorm over the last axis, with the residual Add before it, becomes one
generated kernel (`norm_fusion`), and the claimed float elementwise nodes become fused groups
(`fusion.fused_groups`), each compiled into one CUDA kernel (`compile_subgraphs`). A run makes
the session's device and stream current (`on_run_start`), and `on_run_end` synchronizes the
stream and raises what a kernel flagged on the device (an index out of range). Runs of one
session take turns (a lock), as kernels enqueue on the session's one stream.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from turnout.graph.ir import GraphView
from turnout.sdk.provider import (
    Capability,
    CompiledState,
    ExecutionProvider,
    FusedSubgraph,
    ProviderFactory,
)

from . import __version__, fusion
from . import kernels as _kernels  # noqa: F401 - importing registers every kernel module
from .backend import Backend
from .fusion import Generated, compile_group
from .kernels.registry import TABLE
from .norm_fusion import SOFTMAX_OPS, compile_norm_group, norm_groups

__all__ = ["CuPyExecutionProvider", "make_stream"]


def make_stream(device_id: int, handle: int) -> Any:
    """The session's stream: CuPy's wrapper of the caller's `cudaStream_t`, or a new one."""
    import cupy

    with cupy.cuda.Device(device_id):
        if handle:
            return cupy.cuda.ExternalStream(handle, device_id)
        return cupy.cuda.Stream(non_blocking=True)


class CuPyExecutionProvider(ExecutionProvider):
    compiles = True

    def __init__(
        self,
        options: Mapping[str, Any] | None,
        factory: ProviderFactory,
        backend: Backend,
    ) -> None:
        super().__init__(options, factory, backend.device.id)
        self.backend = backend
        self.fuse = bool(self.options.get("fuse", True))
        self.generated: Generated = []
        """Each (program, layout) this session generated CUDA for (the compile-only check
        and the tests read it)."""
        self._lock = threading.Lock()
        self._local = threading.local()
        if not backend.emulated:
            from .allocator import CuPyAllocator
            from .data_transfer import CuPyDataTransfer
            from .stream import CuPyStream

            self.stream = CuPyStream(backend.stream, self.device)
            self.allocator = CuPyAllocator(self.device)
            self.data_transfer = CuPyDataTransfer(self.device, backend.stream)
        self.kernels = TABLE.bind(backend, self.name)

    def fused_groups(
        self, graph: GraphView, claims: Sequence[Capability]
    ) -> dict[str, Sequence[str]]:
        """Row-wise normalisation groups first, then connected elementwise chains among the
        nodes they left."""
        claimed = [c.nodes[0] for c in claims]
        norms = norm_groups(graph, claimed)
        taken = {n for g in norms for n in g}
        groups = fusion.fused_groups(graph, [n for n in claimed if n not in taken])
        named: dict[str, Sequence[str]] = {
            f"cupy_row_{k}_{members[0]}": members for k, members in enumerate(norms)
        }
        named.update({f"cupy_fused_{k}_{m[0]}": m for k, m in enumerate(groups)})
        return named

    def compile_subgraphs(self, subgraphs: Sequence[FusedSubgraph]) -> list[CompiledState]:
        out = []
        for sg in subgraphs:
            norm = sg.nodes[-1].op_type in ("LayerNormalization", *SOFTMAX_OPS)
            compile_one = compile_norm_group if norm else compile_group
            out.append(compile_one(sg, self.backend, self.kernels, self.generated))
        return out

    def compatibility_info(self) -> str:
        return f"turnout-cupy {__version__}; {self.device}"

    # ------------------------------------------------------------------ runs
    def on_run_start(self) -> None:
        """Take the device for this run and make its device and stream current."""
        self._lock.acquire()
        stack = contextlib.ExitStack()
        try:
            if self.backend.emulated:
                stack.enter_context(np.errstate(all="ignore"))
            else:
                import cupy

                stack.enter_context(cupy.cuda.Device(self.device.id))
                stack.enter_context(self.backend.stream)
        except BaseException:
            stack.close()
            self._lock.release()
            raise
        self._local.stack = stack

    def on_run_end(self) -> None:
        """Wait for the stream, raise a flagged device error, and give the device back."""
        try:
            if self.backend.stream is not None:
                self.backend.stream.synchronize()
            self.backend.checks.raise_pending()
        finally:
            stack = getattr(self._local, "stack", None)
            self._local.stack = None
            try:
                if stack is not None:
                    stack.close()
            finally:
                self._lock.release()
