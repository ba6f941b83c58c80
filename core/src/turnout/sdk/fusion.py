"""Finding fusion groups: the graph analysis every fusing provider needs, kept out of providers.

A provider that compiles connected nodes into one kernel must answer the same questions whatever
its device: which node produces and which nodes read each value (a subgraph's reads through
`Node.implicit_inputs` and the graph's outputs count, or a fused value would go missing), which
groups can run as one step, and which values cross a group's boundary. This module answers them;
the provider keeps only its own rules (which ops it fuses, dtype and shape limits).

Grouping is greedy in topological order, like XLA's and TVM's elementwise fusion: a fusible node
joins the groups of its fusible producers when the union stays *convex* (no path leaves the group
and comes back into it: such a group could not run as one step), otherwise it joins the largest
single producer group that stays convex, otherwise it starts a group. Groups of one node are not
returned (the node runs its own kernel). The result depends only on the node order, so the same
graph always gives the same groups.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence

from turnout.graph.ir import GraphView, Node

__all__ = ["GraphIndex", "find_groups", "group_inputs", "group_outputs", "is_convex"]


class GraphIndex:
    """Producer/reader lookups of one graph, built once so grouping stays linear in graph size."""

    def __init__(self, nodes: Sequence[Node], graph_outputs: Iterable[str]) -> None:
        self.nodes = list(nodes)
        """The nodes in topological order."""
        self.order = {n.name: i for i, n in enumerate(self.nodes)}
        self.by_name = {n.name: n for n in self.nodes}
        self.producer: dict[str, str] = {y: n.name for n in self.nodes for y in n.outputs if y}
        """Value name -> name of the node that produces it (graph inputs have none)."""
        self.readers: dict[str, list[str]] = {}
        """Value name -> names of the nodes that read it, subgraph reads included, each once."""
        for n in self.nodes:
            for x in dict.fromkeys((*n.inputs, *n.implicit_inputs)):
                if x:
                    self.readers.setdefault(x, []).append(n.name)
        self.graph_outputs = set(graph_outputs)
        self._successors: dict[str, frozenset[str]] = {}

    @staticmethod
    def of(view: GraphView) -> GraphIndex:
        """The index of a provider's `GraphView` (its nodes and the graph's outputs)."""
        return GraphIndex(view.nodes, (o.name for o in view.outputs))

    def successors(self, name: str) -> frozenset[str]:
        """Names of the nodes that read any output of node `name` (computed once per node:
        grouping asks for them again at every convexity check)."""
        found = self._successors.get(name)
        if found is None:
            out: set[str] = set()
            for y in self.by_name[name].outputs:
                if y:
                    out.update(self.readers.get(y, ()))
            found = self._successors[name] = frozenset(out)
        return found


def is_convex(
    group: Collection[str],
    idx: GraphIndex,
    leaving: Iterable[str] | None = None,
    last: int | None = None,
) -> bool:
    """True when no path leaves `group` and re-enters it (only then can it run as one step).

    Only nodes before the group's last member are searched: a later node cannot lead back.
    `leaving`: the nodes outside `group` that read a member's output, and `last`: the last
    member's position, when the caller keeps them (`find_groups` does, so that a growing
    group is not walked member by member).
    """
    if last is None:
        last = max(idx.order[n] for n in group)
    if leaving is None:
        leaving = (s for n in group for s in idx.successors(n))
    stack = [s for s in leaving if s not in group]
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


def find_groups(
    idx: GraphIndex,
    fusible: Collection[str],
    key: Callable[[str], Hashable] | None = None,
) -> list[list[str]]:
    """Maximal convex groups of two or more `fusible` nodes, each in topological order.

    `key` is the provider's compatibility rule: a node joins only producer groups whose members
    have the same key as the node (e.g. its static output shape, when one kernel iterates one
    index space). Without `key` every fusible node is compatible with every other. Groups are
    listed in the order of their first member's group creation, which is deterministic.
    """
    keys = {n: key(n) for n in fusible} if key is not None else None
    group_of: dict[str, int] = {}
    groups: dict[int, set[str]] = {}
    leaving: dict[int, set[str]] = {}  # per group: outside readers of its members' outputs
    next_id = 0

    def leaving_of(members: set[str], parts: Iterable[int], node: str) -> set[str]:
        out = set(idx.successors(node)).union(*(leaving[g] for g in parts))
        return out - members

    for node in idx.nodes:
        if node.name not in fusible:
            continue
        parents = {
            group_of[p]
            for x in node.inputs
            if x
            and (p := idx.producer.get(x)) is not None
            and p in group_of
            and (keys is None or keys[p] == keys[node.name])
        }
        chosen: int | None = None
        out: set[str] = set()
        here = idx.order[node.name]  # the last member of any group it joins
        if parents:
            merged = set().union(*(groups[g] for g in parents)) | {node.name}
            out = leaving_of(merged, parents, node.name)
            if is_convex(merged, idx, out, here):
                keep = min(parents)
                for g in parents - {keep}:
                    leaving.pop(g)
                    for m in groups.pop(g):
                        group_of[m] = keep
                groups[keep] = merged - {node.name}
                chosen = keep
            else:
                for g in sorted(parents, key=lambda g: -len(groups[g])):
                    one = groups[g] | {node.name}
                    out = leaving_of(one, (g,), node.name)
                    if is_convex(one, idx, out, here):
                        chosen = g
                        break
        if chosen is None:
            chosen = next_id
            next_id += 1
            groups[chosen] = set()
            out = set(idx.successors(node.name))
        groups[chosen].add(node.name)
        leaving[chosen] = out
        group_of[node.name] = chosen
    return [sorted(m, key=idx.order.__getitem__) for m in groups.values() if len(m) > 1]


def group_inputs(members: Sequence[str], idx: GraphIndex) -> list[str]:
    """Values the group reads but does not produce, in first-read order: the kernel's inputs."""
    nodes = [idx.by_name[n] for n in members]
    produced = {y for n in nodes for y in n.outputs if y}
    out: dict[str, None] = {}
    for n in nodes:
        for x in (*n.inputs, *n.implicit_inputs):
            if x and x not in produced:
                out.setdefault(x)
    return list(out)


def group_outputs(members: Sequence[str], idx: GraphIndex) -> list[str]:
    """Values produced in the group that a node outside it (or a subgraph) reads, or that are
    graph outputs: the values the kernel must export. Never empty: a group nothing reads still
    exports its last node's first output."""
    inside = set(members)
    outs: list[str] = []
    for name in members:
        for y in idx.by_name[name].outputs:
            if y and (
                y in idx.graph_outputs or any(r not in inside for r in idx.readers.get(y, ()))
            ):
                outs.append(y)
    if not outs:
        outs.append(idx.by_name[members[-1]].outputs[0])
    return outs
