"""Which inputs of a node are constants a kernel may prepare once.

A kernel that repacks a weight (transposes it, quantizes it, checks its indices) does the work
at build time only when the input cannot change between runs: `constant_input` says so, and
`constant_value` gives the array; `transposed` makes the (K, N) copy of an (N, K) weight.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.sdk.provider import KernelNode

__all__ = ["constant_input", "constant_value", "transposed"]

TRANSPOSE_TILE = 128
"""Rows and columns of each tile `transposed` copies. numpy's own transposing copy walks the
source by columns, a cache miss per element once rows are long: alexnet's 4096x9216 weight took
300 ms (745 ms into fresh pages) where tiles of 64 or 128 took 99 ms, 256 and 512 about 130."""

TILED_ABOVE = 1 << 21
"""Matrices of more elements are copied by tiles; smaller ones in one numpy call, which is as
fast up to about 1024x1024 (597 against 611 us; 2048x2048: 8.2 against 2.4 ms) and costs no
Python loop where a kernel transposes an activation every run."""


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


def transposed(matrix: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`np.ascontiguousarray(matrix.T)` for a 2-D array, copied tile by tile (same values)."""
    rows, cols = matrix.shape
    out = np.empty((cols, rows), matrix.dtype)
    tile = TRANSPOSE_TILE
    if rows * cols <= TILED_ABOVE:
        out[...] = matrix.T
        return out
    for i in range(0, rows, tile):
        for j in range(0, cols, tile):
            out[j : j + tile, i : i + tile] = matrix[i : i + tile, j : j + tile].T
    return out
