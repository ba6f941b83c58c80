"""Which inputs of a node are constants a kernel may prepare once.

A kernel that repacks a weight (transposes it, quantizes it, checks its indices) does the work
at build time only when the input cannot change between runs: `constant_input` says so, and
`constant_value` gives the array.
"""

from __future__ import annotations

from typing import Any

from turnout.sdk.provider import KernelNode

__all__ = ["constant_input", "constant_value"]


def constant_input(node: KernelNode, index: int) -> bool:
    """Whether input `index` is an initializer of the node's graph that no feed can replace.

    The plan then hands the kernel the same read-only array on every run (a session's
    initializer override is fixed when the plan is built), so a kernel may keep what it
    derives from that array (a transposed weight, checked indices) keyed by its identity.
    """
    inputs = node.node.inputs
    if index >= len(inputs) or not inputs[index]:
        return False
    name = inputs[index]
    graph = node.node.graph
    return name in graph.initializers and all(i.name != name for i in graph.inputs)


def constant_value(node: KernelNode, index: int) -> Any | None:
    """Input `index`'s initializer array when `constant_input` holds, else None."""
    if not constant_input(node, index):
        return None
    return node.node.graph.initializers[node.node.inputs[index]]
