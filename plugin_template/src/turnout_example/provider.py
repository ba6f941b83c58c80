"""ExampleProvider: which nodes this provider runs, and how it compiles fused groups.

The base class's `_get_capability` claims, one node at a time, every node the kernel registry
matches (op type, opset version, dtypes) and declines the rest with the registry's reason. This
provider then merges chains of claimed elementwise nodes into fused groups (option `fuse`), which
turnout hands back to `_compile` at session creation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turnout.ir import GraphView
from turnout.provider import Capability, CompiledKernel, Decline, ExecutionProvider

from . import ALIAS, PROVIDER_NAME
from .allocator import DEVICE, ExampleAllocator
from .data_transfer import ExampleDataTransfer
from .kernels import KERNELS
from .kernels.fused import compile_chain, find_chains

__all__ = ["ExampleProvider"]


class ExampleProvider(ExecutionProvider):
    name = PROVIDER_NAME
    device = DEVICE

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.kernels = KERNELS
        self.allocator = ExampleAllocator()
        self.data_transfer = ExampleDataTransfer()
        self.fuse = bool(self.options.get("fuse", True))

    def _get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        claims, declines = super()._get_capability(graph)
        if not self.fuse:
            return claims, declines
        by_node = {c.nodes[0]: c for c in claims}
        merged: list[Capability] = []
        for chain in find_chains(graph, by_node):
            if len(chain) == 1:
                merged.append(by_node[chain[0]])
            else:
                name = f"{ALIAS}_fused_{chain[0]}"
                merged.append(Capability(tuple(chain), kernel=None, name=name))
        return merged, declines

    def _compile(self, groups: Sequence[tuple[Capability, GraphView]]) -> list[CompiledKernel]:
        return [
            compile_chain(cap.name or f"{ALIAS}_fused_{cap.nodes[0]}", graph, cap.nodes, KERNELS)
            for cap, graph in groups
        ]
