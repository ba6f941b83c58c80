"""Fused groups: chains of elementwise nodes compiled into one kernel function.

`find_chains` proposes maximal chains n1 -> n2 -> ... -> nk of claimed elementwise nodes in which
each node's output is read only by the next node (and is not a graph output), so the chain's
intermediate values never leave it and merging it cannot create a cycle. `compile_chain` turns a
chain into one `CompiledKernel` that runs the nodes' kernels back to back. A compiling backend
would generate a single device kernel for the chain here instead.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from turnout.errors import EPFail
from turnout.ir import GraphView
from turnout.provider import CompiledKernel, KernelRegistry

from .elementwise import FUSABLE

__all__ = ["compile_chain", "find_chains"]


def find_chains(graph: GraphView, claimed: Collection[str]) -> list[list[str]]:
    """Split the `claimed` nodes (names) into maximal fusable chains, in graph order."""
    nodes = {n.name: n for n in graph.nodes if n.name in claimed}
    graph_outputs = {v.name for v in graph.outputs}
    successor: dict[str, str] = {}
    has_predecessor: set[str] = set()
    for node in nodes.values():
        if node.op_type not in FUSABLE or len(node.outputs) != 1:
            continue
        if node.outputs[0] in graph_outputs:
            continue
        readers = graph.consumers(node.outputs[0])
        if len(readers) != 1:
            continue
        nxt = readers[0]
        if nxt.name in nodes and nxt.op_type in FUSABLE and nxt.name not in has_predecessor:
            successor[node.name] = nxt.name
            has_predecessor.add(nxt.name)
    chains = []
    for name in nodes:
        if name in has_predecessor:
            continue
        chain = [name]
        while chain[-1] in successor:
            chain.append(successor[chain[-1]])
        chains.append(chain)
    return chains


def compile_chain(
    name: str, graph: GraphView, chain: Sequence[str], registry: KernelRegistry
) -> CompiledKernel:
    """One kernel function over the chain's boundary: its outside inputs in, its outputs out."""
    by_name = {n.name: n for n in graph.nodes}
    nodes = [by_name[x] for x in chain]
    produced = {y for n in nodes for y in n.outputs}
    inputs = tuple(dict.fromkeys(x for n in nodes for x in n.inputs if x not in produced))
    outputs = tuple(nodes[-1].outputs)
    steps = []
    for node in nodes:
        kn = graph.kernel_node(node)
        kernel, reason = registry.match(kn)
        if kernel is None:
            raise EPFail(f"{name}: node {node.name!r} has no kernel: {reason}")
        steps.append((kernel.factory(kn), node.inputs, node.outputs))

    def run(*args: Any) -> tuple[Any, ...]:
        values = dict(zip(inputs, args, strict=True))
        for fn, ins, outs in steps:
            values.update(zip(outs, fn(*[values[x] for x in ins]), strict=True))
        return tuple(values[y] for y in outputs)

    return CompiledKernel(name, run, inputs, outputs)
