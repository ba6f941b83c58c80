"""The graph's structure as onnxruntime judges it, before onnx.checker sees the model.

onnx.checker is stricter than onnxruntime in places (nodes out of topological order, the
domain spelled "ai.onnx", an empty graph name) and gives other exception classes where both
refuse. `normalize` makes the first kind loadable, as onnxruntime does; `check_structure`
refuses the second kind with onnxruntime's class and names what is at fault;
`suffix_repeated_names` then keeps apart the nodes onnxruntime lets share a name.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TypeProto

from turnout.graph.errors import Fail, InvalidArgument

__all__ = [
    "NAME_IN_MODEL_KEY",
    "SUFFIX_MARK",
    "check_structure",
    "normalize",
    "suffix_repeated_names",
]

SUFFIX_MARK = "~"
"""What separates a repeated node name from the number turnout adds to it (`F0::anon~1`)."""

NAME_IN_MODEL_KEY = "turnout.name_in_model"
"""The node `metadata_props` entry that keeps the name a suffixed node has in the model."""


def normalize(model: ModelProto) -> None:
    """Edit `model` in place: the default domain spelled "" everywhere, a negative declared
    dim read as an unknown one (Paddle exports write -1 for "any"; onnxruntime reads it so),
    every graph's nodes in topological order (onnxruntime sorts them; the checker refuses
    them unsorted), and a Constant's sparse tensor held in `value` moved to `sparse_value`
    (onnxruntime reads the attribute by its type; the checker wants a dense `value`)."""
    for op in model.opset_import:
        if op.domain == "ai.onnx":
            op.domain = ""
    for g in _graphs(model.graph):
        for n in g.node:
            if n.domain == "ai.onnx":
                n.domain = ""
            if n.op_type == "Constant" and n.domain == "":
                _sparse_value_by_its_name(n)
        for vi in (*g.input, *g.output, *g.value_info):
            _unknown_negative_dims(vi.type)
    _toposort(model.graph, set())


def _sparse_value_by_its_name(node: NodeProto) -> None:
    for a in node.attribute:
        if a.name == "value" and a.type == AttributeProto.SPARSE_TENSOR:
            a.name = "sparse_value"


def _unknown_negative_dims(tp: TypeProto) -> None:
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        for d in getattr(tp, kind).shape.dim:
            if d.HasField("dim_value") and d.dim_value < 0:
                d.Clear()
    elif kind == "sequence_type":
        _unknown_negative_dims(tp.sequence_type.elem_type)
    elif kind == "optional_type":
        _unknown_negative_dims(tp.optional_type.elem_type)
    elif kind == "map_type":
        _unknown_negative_dims(tp.map_type.value_type)


def check_structure(model: ModelProto, label: str) -> None:
    """Refuse what onnxruntime refuses about names and wiring, with its exception classes."""
    if not model.opset_import:
        raise Fail(f"{label}: the model imports no opset")
    g = model.graph
    if not g.output:
        raise Fail(f"{label}: the graph has no outputs")
    _check_graph(g, label, set())


def _check_graph(g: GraphProto, label: str, outer: set[str]) -> None:
    defined: set[str] = set()

    def define(name: str, what: str) -> None:
        if name in defined:
            raise Fail(f"{label}: duplicate definition of {name!r} ({what})")
        defined.add(name)

    for vi in g.input:
        define(vi.name, "a graph input")
    inits = {t.name for t in g.initializer} | {s.values.name for s in g.sparse_initializer}
    defined |= inits  # an initializer may also be a graph input (an overridable one)
    names: set[str] = set()
    for n in g.node:
        # onnxruntime turns Constant nodes (of any domain) into initializers before it checks
        # names: only the other nodes of a graph must be named apart (OpenVINO names many
        # Constants "F0::anon"; a subgraph may reuse an outer graph's names)
        if n.name and n.op_type != "Constant":
            if n.name in names:
                raise Fail(
                    f"{label}: two nodes are named {n.name!r} (onnxruntime lets only Constant "
                    "nodes share a name)"
                )
            names.add(n.name)
        for o in n.output:
            if o:
                define(o, f"an output of node {n.name or n.op_type!r}")
    visible = defined | outer
    for n in g.node:
        for x in n.input:
            if x and x not in visible:
                raise InvalidArgument(
                    f"{label}: input {x!r} of node {n.name or n.op_type!r} is not a graph "
                    "input, initializer, or output of a previous node"
                )
        for sub in _subgraphs(n):
            _check_graph(sub, label, visible)
    for o in g.output:
        if o.name not in visible:
            raise Fail(f"{label}: graph output {o.name!r} is not produced by any node")


def suffix_repeated_names(model: ModelProto) -> None:
    """Rename in place each node whose graph has an earlier node of the same name to
    `NAME~k`, the smallest k >= 1 that no node of that graph is named, and keep its name in
    the model under `NAME_IN_MODEL_KEY`: reports, profiles, plans and optimizer passes key
    nodes by name within a graph, and must tell these apart. Unnamed nodes stay unnamed."""
    for g in _graphs(model.graph):
        taken = {n.name for n in g.node}
        if len(taken) == len(g.node):
            continue  # the usual case: every node named apart
        seen: set[str] = set()
        for n in g.node:
            if not n.name:
                continue
            if n.name in seen:
                k = 1
                while f"{n.name}{SUFFIX_MARK}{k}" in taken:
                    k += 1
                n.metadata_props.add(key=NAME_IN_MODEL_KEY, value=n.name)
                n.name = f"{n.name}{SUFFIX_MARK}{k}"
                taken.add(n.name)
            seen.add(n.name)


def _toposort(g: GraphProto, outer: set[str]) -> None:
    """Order `g`'s nodes so each comes after the producers of its inputs (its subgraphs'
    outer references included), keeping the given order where it already works (Kahn's
    algorithm, smallest index first); a node whose inputs never appear goes to the end, for the
    checks to name it."""
    available = outer | {vi.name for vi in g.input} | {t.name for t in g.initializer}
    available |= {s.values.name for s in g.sparse_initializer}
    nodes = list(g.node)
    reads = [set(_reads(n)) - {""} for n in nodes]
    if _in_order(nodes, reads, set(available)):
        order = list(range(len(nodes)))
    else:
        order = _kahn(nodes, reads, available)
    if order != sorted(order):
        copies = [NodeProto() for _ in order]
        for c, i in zip(copies, order):
            c.CopyFrom(nodes[i])
        del g.node[:]
        g.node.extend(copies)
    inner = available | {o for n in nodes for o in n.output if o}
    for n in g.node:
        for sub in _subgraphs(n):
            _toposort(sub, inner)


def _in_order(nodes: list[NodeProto], reads: list[set[str]], available: set[str]) -> bool:
    """Whether every node already comes after the producers of what it reads (the usual case,
    checked in one pass)."""
    for n, need in zip(nodes, reads):
        if not need <= available:
            return False
        available.update(n.output)
    return True


def _kahn(nodes: list[NodeProto], reads: list[set[str]], available: set[str]) -> list[int]:
    """Node indices in an order where each comes after its producers, smallest index first
    among the ready ones; nodes that can never be ready (a dangling input) come last."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waiting = [0] * len(nodes)
    consumers: list[list[int]] = [[] for _ in nodes]
    blocked: set[int] = set()
    for i, need in enumerate(reads):
        for name in need - available:
            j = producer.get(name)
            if j is None or j == i:
                blocked.add(i)
            else:
                waiting[i] += 1
                consumers[j].append(i)
    ready = [i for i in range(len(nodes)) if not waiting[i] and i not in blocked]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        j = heapq.heappop(ready)
        order.append(j)
        available.update(o for o in nodes[j].output if o)
        for i in consumers[j]:
            waiting[i] -= 1
            if not waiting[i] and i not in blocked:
                heapq.heappush(ready, i)
    placed = set(order)
    order.extend(i for i in range(len(nodes)) if i not in placed)
    return order


def _reads(n: NodeProto) -> Iterator[str]:
    """Names node `n` reads: its inputs and what its subgraphs take from outer scopes."""
    yield from n.input
    for sub in _subgraphs(n):
        yield from _outer_reads(sub)


def _outer_reads(g: GraphProto) -> set[str]:
    local = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    local |= {o for n in g.node for o in n.output}
    reads = {x for n in g.node for x in _reads(n)}
    return reads - local - {""}


def _subgraphs(n: NodeProto) -> Iterable[GraphProto]:
    for a in n.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.g
        elif a.type == AttributeProto.GRAPHS:
            yield from a.graphs


def _graphs(g: GraphProto) -> Iterator[GraphProto]:
    yield g
    for n in g.node:
        for sub in _subgraphs(n):
            yield from _graphs(sub)
