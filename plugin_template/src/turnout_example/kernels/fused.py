"""Fused groups: connected elementwise nodes compiled into one kernel.

`find_fused_groups` asks `turnout.sdk.fusion` for maximal convex groups of the claimed nodes whose op
is in `FUSABLE` (the graph analysis is turnout's: producers, readers, convexity); the provider
keeps only its rule of which ops fuse. `compile_group` turns one `FusedSubgraph` (its nodes in
order, its typed boundary, the constants it reads) into a `CompiledState`: `create` builds the
member kernels once, `compute` runs them back to back, `release` drops them. A compiling
backend would generate one device kernel for the subgraph in `create` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from turnout.graph.errors import EPFail
from turnout.graph.ir import GraphView
from turnout.sdk.ep import CompiledState, FusedSubgraph, KernelTable
from turnout.sdk.fusion import GraphIndex, find_groups

from .elementwise import FUSABLE

__all__ = ["compile_group", "find_fused_groups"]

_Step = tuple[Callable[..., Sequence[Any]], Sequence[str], Sequence[str]]


def find_fused_groups(graph: GraphView, claimed: Collection[str]) -> list[list[str]]:
    """Groups of two or more claimed elementwise nodes that can run as one step."""
    by_name = {n.name: n for n in graph.nodes}
    fusible = {n for n in claimed if by_name[n].op_type in FUSABLE}
    return find_groups(GraphIndex.of(graph), fusible)


def compile_group(subgraph: FusedSubgraph, registry: KernelTable) -> CompiledState:
    """One state over the subgraph's boundary: its inputs in, its outputs out."""
    inputs = tuple(v.name for v in subgraph.inputs)
    outputs = tuple(v.name for v in subgraph.outputs)

    def create() -> list[_Step]:
        steps: list[_Step] = []
        for node in subgraph.nodes:
            kn = subgraph.kernel_node(node)
            kernel, reason = registry.match(kn)
            if kernel is None:
                raise EPFail(f"{subgraph.name}: node {node.name!r} has no kernel: {reason}")
            steps.append((kernel.factory(kn), node.inputs, node.outputs))
        return steps

    def compute(steps: list[_Step], *args: Any) -> tuple[Any, ...]:
        values = dict(zip(inputs, args, strict=True))
        for fn, ins, outs in steps:
            values.update(zip(outs, fn(*[values[x] for x in ins]), strict=True))
        return tuple(values[y] for y in outputs)

    def release(steps: list[_Step]) -> None:
        steps.clear()  # a device backend frees its buffers and programs here

    return CompiledState(subgraph.name, inputs, outputs, compute, create, release)
