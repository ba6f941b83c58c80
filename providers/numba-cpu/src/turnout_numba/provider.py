"""NumbaExecutionProvider: numba-compiled kernels and fused elementwise groups on the CPU.

`get_capability` claims, for each node:
- a numba kernel when one is registered and applies (dtypes and ranks known at session
  creation; source "numba");
- otherwise turnout's own numpy kernel for it, where compilation buys nothing or numba does not
  cover the node yet (shape/metadata ops, strings, sequences, control flow, BLAS-shaped ops...;
  source "numpy"), so the provider can take whole models;
- otherwise it declines with both reasons.
Then connected elementwise nodes become fused groups (`fusion.find_groups`), which turnout hands
back to `compile_subgraphs` as `FusedSubgraph`s (nodes, typed boundary, constant initializers):
each becomes one generated kernel (`codegen.compile_group`), wrapped in a `CompiledState`.
Everything compiles while the session is created.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numba
import numpy as np
from numba import prange

from turnout.graph.ir import GraphView
from turnout.providers.cpu import numpy_kernels
from turnout.sdk.blas_threads import BlasThreads
from turnout.sdk.cores import default_thread_count
from turnout.sdk.provider import (
    Capability,
    CompiledState,
    Decline,
    ExecutionProvider,
    FusedSubgraph,
    KernelNode,
    ProviderFactory,
)

from . import artifacts, cache
from . import kernels as _kernels  # noqa: F401 - importing registers every kernel module
from .cache import NUMBA_CONFIG
from .codegen import EW_OPS, compile_group
from .fusion import GraphIndex, find_groups
from .registry import TABLE, BuildContext, serves_op
from .threading_layer import choose_layer, run_lock

__all__ = ["NUMBA_SOURCE", "NUMPY_SOURCE", "NumbaExecutionProvider"]

NUMBA_SOURCE = "numba"
NUMPY_SOURCE = "numpy"


class NumbaExecutionProvider(ExecutionProvider):
    compiles = True
    kernel_source = NUMBA_SOURCE

    def __init__(
        self, options: Mapping[str, Any] | None = None, factory: ProviderFactory | None = None
    ) -> None:
        super().__init__(options, factory)  # name and device: the factory's
        # 0 (the default): the physical cores, as onnxruntime's (`turnout.sdk.cores`)
        threads = int(self.options.get("intra_op_num_threads", 0) or 0) or default_thread_count()
        self.threads = min(threads, NUMBA_CONFIG.NUMBA_NUM_THREADS)
        self.fuse = bool(self.options.get("fuse", True))
        # the generated modules this session's kernels come from: its compiled model's blobs
        self.ctx = BuildContext(parallel=self.threads != 1)
        self._modules = self.ctx.modules
        self.kernels = TABLE.bind(self.ctx, self.name)
        self._run_state = threading.local()  # saved thread counts of the run on this thread
        # BLAS gets the same budget while this session runs: no oversubscription
        self._blas = BlasThreads(self.threads)

    # ------------------------------------------------------------------ partitioning
    def _get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        # here, not at creation: a compiled model's blobs are imported in between
        with cache.recording(self._modules):
            _start_numba_runtime(self.ctx.parallel)
        return super()._get_capability(graph)

    def _claim_unmatched(self, node: KernelNode, reason: str) -> Capability | str:
        """turnout's numpy kernel where numba has none (or declines the node)."""
        d, numpy_reason = numpy_kernels().match(node)
        if d is None:
            return f"numba: {reason}; numpy: {numpy_reason}"
        return Capability((node.name,), d, source=NUMPY_SOURCE)

    def fused_groups(
        self, graph: GraphView, claims: Sequence[Capability]
    ) -> dict[str, Sequence[str]]:
        """Connected elementwise nodes that run numba kernels (not 16-bit floats), as groups."""
        numba_claims = {c.nodes[0] for c in claims if c.source == NUMBA_SOURCE}
        fusible = {
            n.name
            for n in graph.nodes
            if n.name in numba_claims and n.op_type in EW_OPS and not _narrow_float(n)
        }
        if len(fusible) < 2:
            return {}
        groups = find_groups(GraphIndex.of(graph), fusible)
        return {f"numba_fused_{k}_{members[0]}": members for k, members in enumerate(groups)}

    def compile_subgraphs(self, subgraphs: Sequence[FusedSubgraph]) -> list[CompiledState]:
        """One generated kernel per group, compiled now (or loaded from numba's cache)."""
        with cache.recording(self._modules):
            return [self._compile_subgraph(sg) for sg in subgraphs]

    def _compile_subgraph(self, sg: FusedSubgraph) -> CompiledState:
        gk = compile_group(
            sg.nodes,
            [o.name for o in sg.outputs],
            sg.name,
            parallel=self.ctx.parallel,
            constants=sg.constants,
            inputs=sg.inputs,
        )
        run = gk.fn
        return CompiledState(sg.name, gk.inputs, gk.outputs, _compute, create=lambda: run)

    def supports_fused_op(self, domain: str, op_type: str, since_version: int) -> bool:
        # numba's kernel table is its own (`self.kernels` stays empty)
        return serves_op(domain, op_type, since_version)

    # ------------------------------------------------------------------ compiled models
    def compatibility_info(self) -> str:
        return artifacts.compatibility(self.ctx.parallel, self.fuse)

    def export_compiled(self) -> dict[str, bytes]:
        return artifacts.export_blobs(self._modules)

    def import_compiled(self, blobs: Mapping[str, bytes]) -> None:
        artifacts.import_blobs(blobs)

    # ------------------------------------------------------------------ threads
    def on_run_start(self) -> None:
        # a serial session's hook is BLAS's alone: a tiny model's whole run costs onnxruntime
        # ~4 us, and every attribute read here is paid by each of its runs
        if self.ctx.parallel:
            self._start_parallel_run()
        try:
            self._blas.enter()
        except BaseException:
            if self.ctx.parallel:
                self._end_parallel_run()
            raise

    def on_run_end(self) -> None:
        BlasThreads.exit()
        if self.ctx.parallel:
            self._end_parallel_run()

    def _start_parallel_run(self) -> None:
        """numba's pool at the session's count, and under workqueue the process's run lock
        (one parallel run at a time); both handed back by `_end_parallel_run`."""
        st = self._run_state
        st.saved = None
        st.lock = run_lock()
        if st.lock is not None:
            st.lock.acquire()
        try:
            # serial sessions never ask numba for its thread count: that starts its pool
            # (10 ms in a 1-thread session's first run); the count is per calling thread
            saved = numba.get_num_threads()
            if saved != self.threads:  # restored at the run's end; unchanged: nothing to do
                numba.set_num_threads(self.threads)
                st.saved = saved
        except BaseException:
            self._end_parallel_run()  # the run lock is not held past a failed start
            raise

    def _end_parallel_run(self) -> None:
        st = self._run_state
        saved = getattr(st, "saved", None)
        if saved is not None:
            numba.set_num_threads(saved)
            st.saved = None
        lock = getattr(st, "lock", None)
        if lock is not None:
            st.lock = None
            lock.release()


_RUNTIME_STARTED: dict[bool, Any] = {}  # parallel flag -> the started runtime's kernel
_RUNTIME_LOCK = threading.Lock()


def _touch(x: Any) -> None:  # pragma: no cover - compiled by numba
    for i in prange(x.shape[0]):
        x[i] = 0


def _start_numba_runtime(parallel: bool) -> None:
    """Once per process, while a session is created: make one compiled call (and, for
    sessions with threads, start numba's thread pool), so that this one-time setup (~0.1 s:
    thread launch, the imports of the first call) is not paid by the first run() (issue: first
    run within 1.5x steady state). A 1-thread session starts no threads."""
    with _RUNTIME_LOCK:
        choose_layer()  # before numba launches its threads
        if parallel in _RUNTIME_STARTED:
            cache.note_used(_RUNTIME_STARTED[parallel])  # each session's artifact carries it
            return
        if parallel:
            numba.get_num_threads()  # launches the threading layer
        kern = cache.jit(_touch, ["void(float32[::1])"], parallel=parallel)
        kern(np.zeros(1, np.float32))
        _RUNTIME_STARTED[parallel] = kern


def _narrow_float(node: Any) -> bool:
    """float16/bfloat16 nodes are not fused: each op must round to its dtype, as unfused."""
    infos = [*node.input_infos, *node.output_infos]
    return any(
        i is not None and i.dtype is not None and i.dtype.itemsize == 2 and i.dtype.kind in "fV"
        for i in infos
    )


def _compute(run: Any, *inputs: Any) -> tuple[Any, ...]:
    """A group's compute: its state is the compiled kernel's run function (nothing to free)."""
    return run(*inputs)  # type: ignore[no-any-return]
