"""Finding fused groups: maximal convex sets of connected elementwise/broadcast nodes.

Greedy in topological order, like XLA's and TVM's elementwise fusion: a fusible node joins the
groups of its fusible producers when the union stays *convex* (no path leaves the group and
comes back into it: such a group could not run as one step), otherwise it joins the largest
single producer group that stays convex, otherwise it starts a group. Groups of one node are
not fused (the node runs its own generated kernel).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from turnout.ir import GraphView, Node

__all__ = ["GraphIndex", "find_groups", "group_outputs"]


class GraphIndex:
    """Producer/consumer lookups of one graph, built once per partitioning."""

    def __init__(self, nodes: Sequence[Node], graph_outputs: Iterable[str]) -> None:
        self.nodes = list(nodes)
        self.order = {n.name: i for i, n in enumerate(self.nodes)}
        self.by_name = {n.name: n for n in self.nodes}
        self.producer: dict[str, str] = {}
        for n in self.nodes:
            for y in n.outputs:
                if y:
                    self.producer[y] = n.name
        self.readers: dict[str, list[str]] = {}
        for n in self.nodes:
            for x in dict.fromkeys((*n.inputs, *n.implicit_inputs)):
                if x:
                    self.readers.setdefault(x, []).append(n.name)
        self.graph_outputs = set(graph_outputs)

    def successors(self, name: str) -> set[str]:
        out: set[str] = set()
        for y in self.by_name[name].outputs:
            if y:
                out.update(self.readers.get(y, ()))
        return out

    @staticmethod
    def of(view: GraphView) -> GraphIndex:
        return GraphIndex(view.nodes, (o.name for o in view.outputs))


def _convex(group: set[str], idx: GraphIndex) -> bool:
    """True when no path leaves `group` and re-enters it."""
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


def find_groups(idx: GraphIndex, fusible: set[str]) -> list[list[str]]:
    """Groups (node names in topological order) of two or more fusible nodes."""
    group_of: dict[str, int] = {}
    groups: dict[int, set[str]] = {}
    next_id = 0
    for node in idx.nodes:
        if node.name not in fusible:
            continue
        parents = {
            group_of[p]
            for x in node.inputs
            if x and (p := idx.producer.get(x)) is not None and p in group_of
        }
        chosen: int | None = None
        if parents:
            merged = set().union(*(groups[g] for g in parents)) | {node.name}
            if _convex(merged, idx):
                keep = min(parents)
                for g in parents - {keep}:
                    for m in groups.pop(g):
                        group_of[m] = keep
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
        groups[chosen].add(node.name)
        group_of[node.name] = chosen
    return [
        sorted(members, key=idx.order.__getitem__)
        for members in groups.values()
        if len(members) > 1
    ]


def group_outputs(members: Sequence[str], idx: GraphIndex) -> list[str]:
    """Values produced in the group that are read outside it or are graph outputs."""
    inside = set(members)
    outs: list[str] = []
    for name in members:
        for y in idx.by_name[name].outputs:
            if not y:
                continue
            readers = idx.readers.get(y, ())
            if y in idx.graph_outputs or any(r not in inside for r in readers):
                outs.append(y)
    if not outs:  # nothing reads the group: still compute its last value
        outs.append(idx.by_name[members[-1]].outputs[0])
    return outs
