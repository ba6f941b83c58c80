"""Basic passes that remove work: dead nodes, unused initializers, no-op nodes, duplicates."""

from __future__ import annotations

from onnx import NodeProto

from .base import Level, PassContext, graph_pass
from .graph import NONDETERMINISTIC, OptGraph, _subgraph_reads, attr

__all__ = ["eliminate_dead_nodes", "eliminate_noops", "eliminate_common_subexpressions"]


@graph_pass("eliminate_dead_nodes", Level.BASIC)
def eliminate_dead_nodes(g: OptGraph, ctx: PassContext) -> int:
    """Remove nodes whose outputs nobody reads, then initializers nobody reads."""
    changes = 0
    needed = set(g.protected)
    kept: list[NodeProto] = []
    for n in reversed(g.nodes):
        if any(o and (o in needed) for o in n.output) or not any(n.output):
            kept.append(n)
            needed.update(x for x in n.input if x)
            needed.update(_subgraph_reads(n))
        else:
            changes += 1
    g.nodes = kept[::-1]
    read_anywhere = needed | g.subgraph_reads()
    for name in g.initializer_names():
        if name not in read_anywhere and name not in g.input_names:
            g.drop_init(name)
            changes += 1
    return changes


def _is_noop(g: OptGraph, n: NodeProto) -> bool:
    op = n.op_type
    if n.domain not in ("", "ai.onnx") or not n.input or not n.input[0]:
        return False
    if op == "Identity":
        return True
    if op == "Dropout":
        if len(n.output) > 1 and n.output[1]:
            return False  # the mask is read
        if len(n.input) > 2 and n.input[2]:
            training = g.const(n.input[2])
            return training is not None and not bool(training)
        return True
    if op == "Cast":
        src = g.elem_type(n.input[0])
        return src is not None and src == attr(n, "to")
    if op == "Transpose":
        perm = attr(n, "perm")
        return perm is not None and list(perm) == list(range(len(perm)))
    if op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand"):
        a, b = g.shape(n.input[0]), g.shape(n.output[0])
        return (
            a is not None
            and b is not None
            and a == b
            and all(isinstance(d, int) for d in a)
            and g.elem_type(n.input[0]) is not None
        )
    return False


@graph_pass("eliminate_noops", Level.BASIC)
def eliminate_noops(g: OptGraph, ctx: PassContext) -> int:
    """Identity, inference Dropout, same-type Cast, identity Transpose and shape-preserving
    Reshape/Squeeze/Unsqueeze/Flatten/Expand (static shapes); Reshape after Reshape."""
    changes = 0
    for n in list(g.nodes):
        if _is_noop(g, n) and g.replace_value(n.output[0], n.input[0]):
            g.remove(n)
            changes += 1
    # Reshape(Reshape(x, s1), s2) == Reshape(x, s2) when s2 has no 0 (copy-from-input) entry
    prod = g.producers()
    reads = g.consumers()
    for n in g.nodes:
        if n.op_type != "Reshape" or n.domain not in ("", "ai.onnx") or len(n.input) < 2:
            continue
        p = prod.get(n.input[0])
        if p is None or p.op_type != "Reshape" or p.domain not in ("", "ai.onnx"):
            continue
        shape = g.const(n.input[1])
        if shape is None or (shape == 0).any() or len(reads.get(p.output[0], [])) != 1:
            continue
        n.input[0] = p.input[0]
        changes += 1
    return changes


def _key(n: NodeProto) -> tuple[object, ...] | None:
    if n.op_type in NONDETERMINISTIC or not n.output:
        return None
    attrs = []
    for a in sorted(n.attribute, key=lambda a: a.name):
        if a.type in (a.GRAPH, a.GRAPHS):
            return None
        attrs.append(a.SerializeToString(deterministic=True))
    return (n.domain or "", n.op_type, tuple(n.input), len(n.output), tuple(attrs))


@graph_pass("eliminate_common_subexpressions", Level.BASIC)
def eliminate_common_subexpressions(g: OptGraph, ctx: PassContext) -> int:
    """Merge nodes computing the same op on the same inputs with the same attributes, and
    identical small constant initializers."""
    changes = 0
    outside = g.protected | g.subgraph_reads()
    rename: dict[str, str] = {}
    # identical small initializers first, so nodes reading them become identical too
    seen_consts: dict[tuple[object, ...], str] = {}
    for name in g.initializer_names():
        size = g.numel(name)
        v = g.const(name) if size is not None and size <= 64 else None
        if v is None or v.size > 64 or v.dtype == object:
            continue
        first_name = seen_consts.setdefault((v.dtype.str, v.shape, v.tobytes()), name)
        if first_name != name and name not in outside:
            rename[name] = first_name
            changes += 1
    seen: dict[tuple[object, ...], NodeProto] = {}
    dropped: list[NodeProto] = []
    for n in g.nodes:
        for i, x in enumerate(n.input):
            if x in rename:
                n.input[i] = rename[x]
        key = _key(n)
        if key is None:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = n
            continue
        pairs = [(m, t) for m, t in zip(n.output, first.output) if m]
        if any(not t or m in outside for m, t in pairs):
            continue
        rename.update(pairs)
        dropped.append(n)
        changes += 1
    g.remove(*dropped)
    return changes
