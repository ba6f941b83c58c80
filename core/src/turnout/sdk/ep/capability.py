"""Capability and compile: what a provider claims, what it declines, and its fused groups.

A provider answers `get_capability` with `Capability` claims (one node run by a table kernel,
or several nodes fused into one group it compiles) and `Decline`s that carry the reason.
turnout hands each fused group back to `compile_subgraphs` as a `FusedSubgraph` and runs the
`CompiledState` it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from turnout.sdk.ep.kernels import KernelDef, KernelFn, KernelNode

if TYPE_CHECKING:
    from turnout.graph.ir import GraphView, Node

__all__ = [
    "Capability",
    "CompiledKernel",
    "CompiledState",
    "Decline",
    "FusedSubgraph",
    "merge_fused",
]


@dataclass(frozen=True)
class Decline:
    """A node the provider will not run, and why (shown in the partition report)."""

    node: str
    reason: str


@dataclass(frozen=True)
class Capability:
    """A claim: one node run by `kernel`, or several nodes fused and compiled (`kernel` None)."""

    nodes: tuple[str, ...]
    kernel: KernelDef | None = None
    name: str | None = None
    source: str = "kernel"

    @property
    def fused(self) -> bool:
        return self.kernel is None


@dataclass
class CompiledKernel:
    """`compile()`'s result for one fused group: a kernel function over the group's boundary."""

    name: str
    fn: KernelFn
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class FusedSubgraph:
    """One fused group as `compile_subgraphs` gets it: its nodes in graph order, the values
    crossing its boundary with their types and shapes, and the initializers among its inputs
    that no feed can replace (the provider may keep them on its device: onnxruntime's
    drop_constant_initializers). The graph a provider sees is the optimized one."""

    name: str
    nodes: tuple[Node, ...]
    inputs: tuple[Any, ...]  # ir.ValueInfo of each boundary input, in first-read order
    outputs: tuple[Any, ...]  # ir.ValueInfo of each value read outside, or a graph output
    constants: Mapping[str, Any]
    view: GraphView

    def kernel_node(self, node: Node) -> KernelNode:
        """The `KernelNode` of a member (its types and schema version), for a kernel
        registry to match and build."""
        return self.view.kernel_node(node)


@dataclass(frozen=True)
class CompiledState:
    """`compile_subgraphs`' answer for one group, in onnxruntime's compiled-node shape:
    `create()` makes the group's state once (device buffers, a compiled program), `compute(
    state, *inputs)` runs it and returns one value per output, `release(state)` frees what
    `create` made when the session goes away."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    compute: Callable[..., tuple[Any, ...]]
    create: Callable[[], Any] = field(default=lambda: None)
    release: Callable[[Any], None] = field(default=lambda state: None)


def merge_fused(
    claims: Sequence[Capability], groups: Mapping[str, Sequence[str]]
) -> list[Capability]:
    """`claims` with the single-node claims of each group's members replaced by one fused
    claim per group (group name -> member node names, in graph order): what the base
    provider does with its `fused_groups` hook's answer. A node in two groups, or a member the
    provider did not claim, is a provider bug and raises, naming both."""
    single = {c.nodes[0] for c in claims if not c.fused}
    taken: dict[str, str] = {}
    fused: list[Capability] = []
    for group, members in groups.items():
        for node in members:
            if node not in single:
                raise ValueError(f"fused group {group!r} holds {node!r}, which was not claimed")
            if node in taken:
                raise ValueError(f"{node!r} is in fused groups {taken[node]!r} and {group!r}")
            taken[node] = group
        fused.append(Capability(tuple(members), None, name=group))
    kept = [c for c in claims if c.fused or c.nodes[0] not in taken]
    return kept + fused
