"""CPUExecutionProvider: turnout's own numpy kernels, onnx.reference for the long tail.

It is always present and always last in priority: the fallback that makes every model run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import __version__
from ...ir import GraphView
from ...provider import (
    Availability,
    Capability,
    Decline,
    DeviceEntry,
    ExecutionProvider,
    KernelDef,
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

    def _get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        claims: list[Capability] = []
        declines: list[Decline] = []
        for node in graph.unassigned_nodes():
            kn = graph.kernel_node(node)
            d, reason = self.kernels.match(kn)
            if d is not None:
                claims.append(Capability((node.name,), d))
                continue
            ref_reason = reference_supports(kn)
            if ref_reason is None:
                ref = KernelDef(node.op_type, node.domain, kn.since_version, reference_kernel)
                claims.append(Capability((node.name,), ref, source=REFERENCE_SOURCE))
            else:
                declines.append(Decline(node.name, f"{reason}; {ref_reason}"))
        return claims, declines


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
