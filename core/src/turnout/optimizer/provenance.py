"""Provenance: which of the model's nodes each node a pass wrote or edited stands for.

A `Tracker` holds a snapshot of the nodes as they are between passes and, after a pass that
changed something, `record`s what it wrote; `OptimizationReport.provenance` is what it leaves
in `sources` for the nodes still in the graph.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

__all__ = ["Labels", "Snapshot", "Tracker", "record", "snapshot"]

Labels = dict[int, tuple[onnx.NodeProto, str]]
"""The original nodes by id (held, so no id is reused) with the name each goes by."""

Snapshot = dict[int, bytes]
"""Each node serialized before a pass, by id; b"" for the nodes not followed: a Constant (its
value can be large) and control flow (its bodies are large, and optimized in place)."""

_NOT_FOLLOWED = frozenset({"Constant", "If", "Loop", "Scan"})


def _bytes(n: onnx.NodeProto) -> bytes:
    return b"" if n.op_type in _NOT_FOLLOWED else n.SerializeToString()


def snapshot(nodes: Sequence[onnx.NodeProto]) -> Snapshot:
    """Each node as it is before a pass, to tell afterwards which ones it edited in place
    (serialized: ten times cheaper than reading its fields from Python)."""
    return {id(n): _bytes(n) for n in nodes}


def _settings(n: onnx.NodeProto) -> onnx.NodeProto:
    """`n` without its inputs and outputs: what an edit that only rewires leaves alone."""
    c = onnx.NodeProto()
    c.CopyFrom(n)
    del c.input[:]
    del c.output[:]
    return c


class Tracker:
    """Provenance over a run of passes, with one snapshot of the nodes between passes.

    Serializing every node before every pass cost more than most passes (densenet121: 39
    pass runs of up to 900 nodes, six of which change anything). A pass that reports no
    change edited nothing (`GraphPass.reports_edits`), so the snapshot taken before it still
    holds after it; one that changed something is followed by the snapshot `record` takes
    of the nodes after it anyway. Only after a pass that may edit without saying so (a
    plugin's) is the snapshot taken again."""

    def __init__(self, labels: Labels, sources: dict[str, list[str]]) -> None:
        self.labels = labels
        self.sources = sources
        self._shapes: Snapshot | None = None

    def before(self, nodes: Sequence[onnx.NodeProto]) -> None:
        """Called with the nodes before a pass (held by the caller until `after`)."""
        if self._shapes is None:
            self._shapes = snapshot(nodes)

    def after(
        self,
        before: Sequence[onnx.NodeProto],
        after: Sequence[onnx.NodeProto],
        changes: int,
        reports_edits: bool,
    ) -> None:
        """Called after the pass with its change count: records what it wrote."""
        assert self._shapes is not None, "Tracker.after without Tracker.before"
        if changes:
            self._shapes = record(before, self._shapes, after, self.labels, self.sources)
        elif not reports_edits:
            self._shapes = None


def record(
    before: Sequence[onnx.NodeProto],
    shapes: Snapshot,
    after: Sequence[onnx.NodeProto],
    labels: Labels,
    sources: dict[str, list[str]],
) -> Snapshot:
    """Link each node a pass wrote or edited to the removed nodes it stands for.

    A written node and a removed one are joined when they produce the same value; two removed
    nodes through a value between them that no node produces any more; two written nodes
    through a value between them that is new. A value that outlives the pass (a fused block's
    output read by the next fusion, an input two fusions read) joins nothing.

    A node edited in place (a Conv that took a BatchNormalization's scale into its weights)
    joins a removed node that read its output (the consumer it absorbed), one whose output it
    makes now, and, when its op or attributes changed, one whose output it read (a producer
    it absorbed). A node only rewired (its inputs renamed to the value a removed node passed
    through) joins nothing. An edited node keeps its own sources besides.

    Removed nodes an earlier pass wrote or edited pass on their own sources.

    Returns the snapshot of `after` (for the next pass)."""
    now_shapes = snapshot(after)
    kept = {id(n) for n in after}
    removed = [n for n in before if id(n) not in kept]
    if not removed:
        return now_shapes
    added = [n for n in after if id(n) not in shapes and n.name]
    edited = [
        n for n in after if n.name and shapes.get(id(n)) not in (None, b"", now_shapes[id(n)])
    ]
    if not added and not edited:
        return now_shapes
    was = {o for n in before for o in n.output if o}
    now = {o for n in after for o in n.output if o}
    parent = list(range(len(removed) + len(added) + len(edited)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        parent[find(i)] = find(j)

    def join(group: list[onnx.NodeProto], offset: int, between: set[str]) -> None:
        """Join the nodes of `group` through the values of `between` one makes, one reads."""
        maker = {o: i for i, n in enumerate(group) for o in n.output if o in between}
        for i, n in enumerate(group):
            for x in n.input:
                j = maker.get(x)
                if j is not None:
                    union(offset + i, offset + j)

    join(removed, 0, was - now)
    join(added, len(removed), now - was)
    out_of = {o: i for i, n in enumerate(removed) for o in n.output if o}
    for k, n in enumerate([*added, *edited], start=len(removed)):
        for o in n.output:
            if o in out_of:
                union(k, out_of[o])
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(removed):
        for x in n.input:
            readers.setdefault(x, []).append(i)
    for k, n in enumerate(edited, start=len(removed) + len(added)):
        old = onnx.NodeProto.FromString(shapes[id(n)])
        for o in old.output:
            for i in readers.get(o, ()):
                union(k, i)
        if _settings(old) != _settings(n):
            for x in old.input:
                if x in out_of:
                    union(k, out_of[x])
    origins: dict[int, set[str]] = {}
    for i, n in enumerate(removed):
        origins.setdefault(find(i), set()).update(_own(n, labels, sources))
    for k, n in enumerate(added, start=len(removed)):
        found = origins.get(find(k))
        if found:
            sources[n.name] = sorted(found)
    for k, n in enumerate(edited, start=len(removed) + len(added)):
        found = origins.get(find(k))
        if found:
            sources[n.name] = sorted(found.union(_own(n, labels, sources)))
    return now_shapes


def _own(n: onnx.NodeProto, labels: Labels, sources: dict[str, list[str]]) -> list[str]:
    """What `n` stands for before this pass: the sources an earlier pass gave it, else its own
    name as an original node."""
    if n.name and n.name in sources:
        return sources[n.name]
    original = labels.get(id(n))
    return [original[1]] if original is not None else [n.name]
