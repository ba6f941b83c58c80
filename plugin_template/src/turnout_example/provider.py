"""ExampleProvider: which nodes this provider runs, and how it compiles fused groups.

The base class's `_get_capability` claims, one node at a time, every node the kernel registry
matches (op type, opset version, dtypes) and declines the rest with the registry's reason. This
provider then merges groups of claimed elementwise nodes (found by `turnout.sdk.fusion`; option
`fuse`), which turnout hands back to `compile_subgraphs` at session creation as subgraphs with
their typed boundary. Note that the graph a provider sees is the optimized one: MatMul + Add
arrives as Gemm, Conv + Relu as a fused Conv, unless the session's optimization level is lower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turnout.graph.ir import GraphView
from turnout.sdk.provider import (
    Capability,
    CompiledState,
    Decline,
    ExecutionProvider,
    FusedSubgraph,
    ProviderFactory,
)

from . import ALIAS
from .allocator import ExampleAllocator
from .data_transfer import ExampleDataTransfer
from .kernels import KERNELS
from .kernels.fused import compile_group, find_fused_groups

__all__ = ["ExampleProvider"]


class ExampleProvider(ExecutionProvider):
    def __init__(self, options: Mapping[str, Any] | None, factory: ProviderFactory) -> None:
        super().__init__(options, factory)  # name and device: the factory's
        self.kernels = KERNELS
        self.allocator = ExampleAllocator(self.device)
        self.data_transfer = ExampleDataTransfer(self.device)
        self.fuse = bool(self.options.get("fuse", True))

    def _get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        claims, declines = super()._get_capability(graph)
        if not self.fuse:
            return claims, declines
        groups = find_fused_groups(graph, {c.nodes[0] for c in claims})
        grouped = {n for g in groups for n in g}
        merged = [c for c in claims if c.nodes[0] not in grouped]
        for group in groups:
            name = f"{ALIAS}_fused_{group[0]}"
            merged.append(Capability(tuple(group), kernel=None, name=name))
        return merged, declines

    def compile_subgraphs(self, subgraphs: Sequence[FusedSubgraph]) -> list[CompiledState]:
        return [compile_group(subgraph, KERNELS) for subgraph in subgraphs]
