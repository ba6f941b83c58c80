"""Fused elementwise groups: connected elementwise nodes generated as ONE OpenCL kernel.

The graph analysis (producer/reader index, convex grouping, group boundaries) is core's
`turnout.sdk.fusion`. OpenCL's own rules live here: a node is fusible when it is a claimed
ai.onnx op in `kernels.elementwise.FUSIBLE` with one output of fully static shape, and it joins
only producer groups of the same output shape (so every value the group exports spans the one
index space the kernel iterates; inputs may still broadcast). Groups of one node are not fused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnout.graph.ir import GraphView, Node
from turnout.sdk import fusion
from turnout.sdk.fusion import GraphIndex
from turnout.sdk.provider import FusedSubgraph, KernelFn

from .kernels.elementwise import FUSIBLE, compile_ew
from .runtime import Runtime

__all__ = ["compile_group", "find_groups"]


def _static_shape(view: GraphView, name: str) -> tuple[Any, ...] | None:
    info = view.value_info(name)
    if info.shape is None or any(d is None or d == "" for d in info.shape):
        return None
    return tuple(info.shape)


def _fusible(node: Node, view: GraphView) -> tuple[Any, ...] | None:
    """The node's static output shape when it can join a fused group, else None."""
    if node.domain or node.op_type not in FUSIBLE or len([y for y in node.outputs if y]) != 1:
        return None
    return _static_shape(view, node.outputs[0])


def find_groups(view: GraphView, claimed: Sequence[str]) -> list[list[str]]:
    """Groups (node names in topological order) of two or more fusible claimed nodes."""
    idx = GraphIndex.of(view)
    ok = set(claimed)
    shape_of: dict[str, tuple[Any, ...]] = {}
    for n in idx.nodes:
        if n.name in ok:
            s = _fusible(n, view)
            if s is not None:
                shape_of[n.name] = s
    return fusion.find_groups(idx, shape_of.keys(), key=shape_of.__getitem__)


def compile_group(rt: Runtime, sg: FusedSubgraph) -> KernelFn:
    """The kernel function of one fused group over its boundary (`sg.inputs` in, `sg.outputs`
    out): one generated OpenCL kernel, built now."""
    types: dict[str, Any] = {v.name: v.dtype for v in sg.inputs}
    for n in sg.nodes:
        types.update((y, i.dtype) for y, i in zip(n.outputs, n.output_infos) if i is not None)
    steps = []
    for n in sg.nodes:
        kn = sg.kernel_node(n)
        steps.append(
            (
                n.op_type,
                dict(n.attrs),
                list(n.inputs),
                n.outputs[0],
                types[n.outputs[0]],
                kn.since_version,
            )
        )
    safe = "".join(c if c.isalnum() else "_" for c in sg.name)[:60]
    inputs = [(v.name, v.dtype) for v in sg.inputs]
    return compile_ew(rt, safe, inputs, steps, [v.name for v in sg.outputs], types)
