"""ExampleProvider: which nodes this provider runs, and how it compiles fused groups.

The base class claims, one node at a time, every node its kernel table (`kernels`) matches (op
type, opset version, dtypes) and declines the rest with the table's reason. Because this
provider declares `compiles = True`, turnout then asks `fused_groups` for groups of claimed
elementwise nodes (found by `turnout.sdk.fusion`; option `fuse`), merges them over the single-
node claims, and hands each group back to `compile_subgraphs` at session creation as a subgraph
with its typed boundary. Note that the graph a provider sees is the optimized one: MatMul + Add
arrives as Gemm, Conv + Relu as a fused Conv, unless the session's optimization level is lower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turnout.graph.ir import GraphView
from turnout.sdk.ep import (
    Capability,
    CompiledState,
    ExecutionProvider,
    FusedSubgraph,
    ProviderFactory,
)

from . import ALIAS
from .kernels import KERNELS
from .kernels.fused import compile_group, find_fused_groups

__all__ = ["ExampleProvider"]


class ExampleProvider(ExecutionProvider):
    kernels = KERNELS  # the module-level kernel table (`kernels/__init__.py`)
    compiles = True  # it fuses groups (`fused_groups`) and compiles them (`compile_subgraphs`)

    def __init__(self, options: Mapping[str, Any] | None, factory: ProviderFactory) -> None:
        # name, device, allocator and transfer: the factory's (`ExampleFactory`)
        super().__init__(options, factory)
        self.fuse = bool(self.options.get("fuse", True))

    def fused_groups(
        self, graph: GraphView, claims: Sequence[Capability]
    ) -> dict[str, Sequence[str]]:
        groups = find_fused_groups(graph, {c.nodes[0] for c in claims})
        return {f"{ALIAS}_fused_{group[0]}": group for group in groups}

    def compile_subgraphs(self, subgraphs: Sequence[FusedSubgraph]) -> list[CompiledState]:
        return [compile_group(subgraph, KERNELS) for subgraph in subgraphs]
