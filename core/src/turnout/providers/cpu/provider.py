"""CPUExecutionProvider: turnout's own numpy kernels, onnx.reference for the long tail.

It is always present and always last in priority: the fallback that makes every model run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout._version import __version__
from turnout.graph.contrib import unsupported_reason
from turnout.graph.model import known_domain
from turnout.providers.cpu.expected_failures import EXPECTED_FAILURES
from turnout.providers.cpu.missing import MISSING_SOURCE, missing_kernel
from turnout.providers.cpu.reference import reference_kernel, reference_supports
from turnout.providers.cpu.registry import CPU_KERNELS
from turnout.sdk.blas_threads import BlasThreads
from turnout.sdk.cores import default_thread_count
from turnout.sdk.custom_ops import CUSTOM_SOURCE
from turnout.sdk.custom_ops import lookup as lookup_custom_op
from turnout.sdk.provider import (
    CONTRACT_VERSION,
    Availability,
    Capability,
    DeviceEntry,
    ExecutionProvider,
    KernelDef,
    KernelNode,
    ProviderFactory,
)
from turnout.sdk.provider_options import ProviderOption

__all__ = ["MISSING_SOURCE", "CPUExecutionProvider", "CPUProviderFactory", "REFERENCE_SOURCE"]

REFERENCE_SOURCE = "onnx.reference"


class CPUExecutionProvider(ExecutionProvider):
    name = "CPUExecutionProvider"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.kernels = CPU_KERNELS
        self._blas: BlasThreads  # set by set_dynamic_option below, at the session's count
        self.set_dynamic_option("intra_op_num_threads", self.options.get("intra_op_num_threads", 0))

    def set_dynamic_option(self, name: str, value: Any) -> None:
        if name != "intra_op_num_threads":
            super().set_dynamic_option(name, value)
            return
        # numpy's BLAS runs on every core unless held to the session's thread count; 0 (the
        # default) is the physical cores, as onnxruntime's, split by turnout (`sdk.cores`)
        threads = int(value or 0)
        self.options[name] = threads
        self._blas = BlasThreads(threads if threads > 0 else default_thread_count())

    def on_run_start(self) -> None:
        self._blas.enter()

    def on_run_end(self) -> None:
        BlasThreads.exit()

    def _claim_unmatched(self, node: KernelNode, reason: str) -> Capability | str:
        """No own kernel: a plugin's custom-op kernel, or onnx.reference when that can run it,
        marked as such.

        A com.microsoft op without a kernel is declined saying so. A node of a domain turnout
        does not define (the loader let it through: session.turnout.allow_unknown_domains)
        is claimed with a kernel that fails, naming the node, only if the node runs.
        """
        custom = lookup_custom_op(node)  # a plugin's op domain (turnout_custom_ops)
        if isinstance(custom, str):
            return custom
        if custom is not None:
            return Capability((node.name,), custom, source=CUSTOM_SOURCE)
        if (node.domain, node.op_type) not in self.kernels.ops():
            contrib_reason = unsupported_reason(node.domain, node.op_type)
            if contrib_reason is not None:
                return contrib_reason
            if not known_domain(node.domain):
                missing = KernelDef(node.op_type, node.domain, node.since_version, missing_kernel)
                return Capability((node.name,), missing, source=MISSING_SOURCE)
        ref_reason = reference_supports(node)
        if ref_reason is not None:
            return f"{reason}; {ref_reason}"
        ref = KernelDef(node.op_type, node.domain, node.since_version, reference_kernel)
        return Capability((node.name,), ref, source=REFERENCE_SOURCE)


class CPUProviderFactory(ProviderFactory):
    name = "CPUExecutionProvider"
    aliases = ("cpu", "CPU")
    default_priority = -1000
    # arena options are accepted for onnxruntime parity; intra_op_num_threads limits BLAS
    options = (
        ProviderOption(
            "intra_op_num_threads",
            (int,),
            0,
            "Threads numpy's BLAS may use during a run (0: its own default, every core); "
            "SessionOptions.intra_op_num_threads sets it.",
            minimum=0,
            dynamic=True,
        ),
        ProviderOption(
            "arena_extend_strategy",
            (str,),
            "knextpoweroftwo",
            "Accepted for onnxruntime parity; the numpy kernels allocate per value.",
            choices=("knextpoweroftwo", "ksameasrequested", "0", "1"),
        ),
        ProviderOption(
            "use_arena", (bool,), True, "Accepted for onnxruntime parity; there is no arena."
        ),
    )
    version = __version__
    vendor = "turnout"
    contract_version = CONTRACT_VERSION

    def _probe(self) -> Availability:
        from turnout.sdk.provider import CPU

        return Availability(True, (DeviceEntry(CPU, {"backend": "numpy"}),), version=__version__)

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return CPUExecutionProvider(options)

    def expected_failures(self) -> Mapping[str, str]:
        return EXPECTED_FAILURES
