"""CPUExecutionProvider: turnout's own numpy kernels, onnx.reference for the long tail.

It is always present and always last in priority: the fallback that makes every model run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import __version__
from ...provider import (
    Availability,
    Capability,
    DeviceEntry,
    ExecutionProvider,
    KernelDef,
    KernelNode,
    ProviderFactory,
)
from . import kernels as _kernels  # noqa: F401 - importing registers every kernel module
from .expected_failures import EXPECTED_FAILURES
from .reference import reference_kernel, reference_supports
from .registry import CPU_KERNELS

__all__ = ["CPUExecutionProvider", "CPUProviderFactory", "REFERENCE_SOURCE"]

REFERENCE_SOURCE = "onnx.reference"


class CPUExecutionProvider(ExecutionProvider):
    name = "CPUExecutionProvider"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.kernels = CPU_KERNELS

    def _claim_unmatched(self, node: KernelNode, reason: str) -> Capability | str:
        """No own kernel: run it on onnx.reference when that can, marked as such."""
        ref_reason = reference_supports(node)
        if ref_reason is not None:
            return f"{reason}; {ref_reason}"
        ref = KernelDef(node.op_type, node.domain, node.since_version, reference_kernel)
        return Capability((node.name,), ref, source=REFERENCE_SOURCE)


class CPUProviderFactory(ProviderFactory):
    name = "CPUExecutionProvider"
    aliases = ("cpu", "CPU")
    default_priority = -1000
    option_names = frozenset({"arena_extend_strategy", "use_arena"})  # accepted for ORT parity
    version = __version__

    def _probe(self) -> Availability:
        from ...provider import CPU

        return Availability(True, (DeviceEntry(CPU, {"backend": "numpy"}),), version=__version__)

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return CPUExecutionProvider(options)

    def expected_failures(self) -> Mapping[str, str]:
        return EXPECTED_FAILURES
