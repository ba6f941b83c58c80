"""Fused elementwise groups: connected elementwise nodes generated as ONE OpenCL kernel.

Greedy in topological order: an elementwise node joins the group of a producer when its output
has the same static shape as the group's (so every value the group exports spans the one index
space the kernel iterates; inputs may still broadcast) and the union stays convex (no path
leaves the group and re-enters it). Groups of one node are not fused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnout.ir import GraphView, Node
from turnout.provider import KernelFn

from .kernels.elementwise import FUSIBLE, compile_ew
from .runtime import Runtime

__all__ = ["compile_group", "find_groups"]


def _static_shape(view: GraphView, name: str) -> tuple[Any, ...] | None:
    info = view.value_info(name)
    if info.shape is None or any(d is None or d == "" for d in info.shape):
        return None
    return tuple(info.shape)


class _Index:
    def __init__(self, view: GraphView) -> None:
        self.nodes = list(view.nodes)
        self.order = {n.name: i for i, n in enumerate(self.nodes)}
        self.by_name = {n.name: n for n in self.nodes}
        self.producer = {y: n.name for n in self.nodes for y in n.outputs if y}
        self.readers: dict[str, list[str]] = {}
        for n in self.nodes:
            for x in dict.fromkeys((*n.inputs, *n.implicit_inputs)):
                if x:
                    self.readers.setdefault(x, []).append(n.name)
        self.graph_outputs = {o.name for o in view.outputs}

    def successors(self, name: str) -> set[str]:
        out: set[str] = set()
        for y in self.by_name[name].outputs:
            if y:
                out.update(self.readers.get(y, ()))
        return out


def _convex(group: set[str], idx: _Index) -> bool:
    last = max(idx.order[n] for n in group)
    stack = [s for n in group for s in idx.successors(n) if s not in group]
    seen: set[str] = set()
    while stack:
        n = stack.pop()
        if n in seen or idx.order[n] > last:
            continue
        seen.add(n)
        for s in idx.successors(n):
            if s in group:
                return False
            stack.append(s)
    return True


def _fusible(node: Node, view: GraphView) -> tuple[Any, ...] | None:
    if node.domain or node.op_type not in FUSIBLE or len([y for y in node.outputs if y]) != 1:
        return None
    return _static_shape(view, node.outputs[0])


def find_groups(view: GraphView, claimed: Sequence[str]) -> list[list[str]]:
    """Groups (node names in topological order) of two or more fusible claimed nodes."""
    idx = _Index(view)
    ok = set(claimed)
    shape_of: dict[str, tuple[Any, ...]] = {}
    for n in idx.nodes:
        if n.name in ok:
            s = _fusible(n, view)
            if s is not None:
                shape_of[n.name] = s
    group_of: dict[str, int] = {}
    groups: dict[int, set[str]] = {}
    gshape: dict[int, tuple[Any, ...]] = {}
    next_id = 0
    for node in idx.nodes:
        if node.name not in shape_of:
            continue
        shape = shape_of[node.name]
        parents = {
            group_of[p]
            for x in node.inputs
            if x and (p := idx.producer.get(x)) in group_of and gshape[group_of[p]] == shape
        }
        chosen = None
        if parents:
            merged = set().union(*(groups[g] for g in parents)) | {node.name}
            if _convex(merged, idx):
                keep = min(parents)
                for g in parents - {keep}:
                    for m in groups.pop(g):
                        group_of[m] = keep
                    gshape.pop(g)
                groups[keep] = merged - {node.name}
                chosen = keep
            else:
                for g in sorted(parents, key=lambda g: -len(groups[g])):
                    if _convex(groups[g] | {node.name}, idx):
                        chosen = g
                        break
        if chosen is None:
            chosen = next_id
            next_id += 1
            groups[chosen] = set()
            gshape[chosen] = shape
        groups[chosen].add(node.name)
        group_of[node.name] = chosen
    return [sorted(m, key=idx.order.__getitem__) for m in groups.values() if len(m) > 1]


def compile_group(
    rt: Runtime, view: GraphView, members: Sequence[str], name: str
) -> tuple[KernelFn, tuple[str, ...], tuple[str, ...]]:
    """(kernel function, boundary inputs, exported outputs) of one fused group."""
    idx = _Index(view)
    inside = set(members)
    nodes = [idx.by_name[n] for n in members]
    produced = {y for n in nodes for y in n.outputs if y}
    types: dict[str, Any] = {}
    inputs: list[str] = []
    for n in nodes:
        for x, info in zip(n.inputs, n.input_infos):
            if x and info is not None:
                types[x] = info.dtype
                if x not in produced and x not in inputs:
                    inputs.append(x)
        for y, info in zip(n.outputs, n.output_infos):
            if y and info is not None:
                types[y] = info.dtype
    outputs: list[str] = []
    for n in nodes:
        for y in n.outputs:
            if y and (
                y in idx.graph_outputs or any(r not in inside for r in idx.readers.get(y, ()))
            ):
                outputs.append(y)
    if not outputs:
        outputs.append(nodes[-1].outputs[0])
    steps = []
    for n in nodes:
        kn = view.kernel_node(n)
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
    safe = "".join(c if c.isalnum() else "_" for c in name)[:60]
    prog = compile_ew(rt, safe, [(x, types[x]) for x in inputs], steps, outputs, types)
    return prog, tuple(inputs), tuple(outputs)
