"""Basic passes that remove work: dead nodes, unused initializers, no-op nodes, duplicates."""

from __future__ import annotations

from collections.abc import Callable

from onnx import NodeProto, helper

from turnout.optimizer.base import Level, PassContext, graph_pass
from turnout.optimizer.graph import NONDETERMINISTIC, OptGraph, attr

__all__ = [
    "castlike_to_cast",
    "eliminate_common_subexpressions",
    "eliminate_dead_nodes",
    "eliminate_noops",
]


@graph_pass("eliminate_dead_nodes", Level.BASIC, keeps_types=True)
def eliminate_dead_nodes(g: OptGraph, ctx: PassContext) -> int:
    """Remove nodes whose outputs nobody reads, then initializers nobody reads."""
    changes = 0
    needed = set(g.protected)
    kept: list[NodeProto] = []
    for n in reversed(g.nodes):
        if any(o and (o in needed) for o in n.output) or not any(n.output):
            kept.append(n)
            needed.update(x for x in n.input if x)
            if g.nested:
                needed.update(g.nested_reads(n))
        else:
            changes += 1
    g.nodes = kept[::-1]
    read_anywhere = needed | g.subgraph_reads()
    for name in g.initializer_names():
        if name not in read_anywhere and name not in g.input_names:
            g.drop_init(name)
            changes += 1
    return changes


_SHAPE_ONLY = ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand")
_REORDER_FREE = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")


def _is_noop(
    g: OptGraph, n: NodeProto, prod: dict[str, NodeProto], read: Callable[[], set[str]]
) -> bool:
    op = n.op_type
    if n.domain not in ("", "ai.onnx") or not n.input or not n.input[0]:
        return False
    if op == "Identity":
        return True
    if op in ("Reshape", "Expand") and len(n.input) > 1 and _shape_of_itself(prod, n):
        return True
    if op == "Expand" and len(n.input) > 1:
        # Expand by ones (of no more dims than x has) keeps x's shape, symbolic dims too
        shape, rank = g.const(n.input[1]), _rank(g, n.input[0])
        if shape is not None and rank is not None and shape.ndim == 1 and len(shape) <= rank:
            return bool((shape == 1).all()) and g.elem_type(n.input[0]) is not None
    if op == "Dropout":
        if len(n.output) > 1 and n.output[1] and n.output[1] in read():
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
    if op in _SHAPE_ONLY:
        return _same_static_shape(g, n.input[0], n.output[0])
    return False


def _same_static_shape(g: OptGraph, a: str, b: str) -> bool:
    sa, sb = g.shape(a), g.shape(b)
    return (
        sa is not None
        and sa == sb
        and all(isinstance(d, int) for d in sa)
        and g.elem_type(a) is not None
    )


def _rank(g: OptGraph, name: str) -> int | None:
    shape = g.shape(name)
    return None if shape is None else len(shape)


def _shape_of_itself(prod: dict[str, NodeProto], n: NodeProto) -> bool:
    """Reshape(x, Shape(x)) or Expand(x, Shape(x)): x as it is, whatever its dims."""
    s = prod.get(n.input[1])
    return (
        s is not None
        and s.op_type == "Shape"
        and s.domain in ("", "ai.onnx")
        and n.input[1] in s.output
        and s.input[0] == n.input[0]
        and not any(a.name in ("start", "end") for a in s.attribute)
    )


def _axes(g: OptGraph, n: NodeProto, rank: int) -> set[int] | None:
    """The explicit axes of a Squeeze/Unsqueeze in [0, rank), None if not constant or none."""
    if len(n.input) > 1 and n.input[1]:
        value = g.const(n.input[1])
        axes = None if value is None else [int(a) for a in value.reshape(-1)]
    else:
        axes = attr(n, "axes")
    if not axes or any(not -rank <= a < rank for a in axes):
        return None
    found = {a % rank for a in axes}
    return found if len(found) == len(axes) else None


def _undone(g: OptGraph, n: NodeProto, prod: dict[str, NodeProto]) -> str | None:
    """For Unsqueeze(Squeeze(x)) or Squeeze(Unsqueeze(x)) over the same axes (the squeezed
    dims of x known to be 1), or a chain of shape-only ops ending in x's static shape: x."""
    p = prod.get(n.input[0])
    if p is None or p.domain not in ("", "ai.onnx") or n.input[0] not in p.output:
        return None
    x = p.input[0] if p.input else ""
    if {p.op_type, n.op_type} == {"Squeeze", "Unsqueeze"} and x:
        wide = n.output[0] if n.op_type == "Unsqueeze" else n.input[0]  # the one with the 1s
        rank = _rank(g, wide)
        shape = g.shape(x)
        if rank is None or shape is None:
            return None
        axes, back = _axes(g, p, rank), _axes(g, n, rank)
        if axes is None or axes != back:
            return None
        if p.op_type == "Squeeze" and any(shape[a] != 1 for a in axes):
            return None  # Squeeze of a dim not known to be 1 would fail at run time
        return str(x) if g.elem_type(x) is not None else None
    for _ in range(4):  # Reshape -> Unsqueeze -> ... back to the shape it started from
        # these keep the elements in order, so the same shape means the same tensor
        if p is None or p.op_type not in _REORDER_FREE or p.domain not in ("", "ai.onnx"):
            return None
        x = p.input[0]
        if x and _same_static_shape(g, x, n.output[0]):
            return str(x)
        p = prod.get(x)
    return None


@graph_pass("castlike_to_cast", Level.BASIC, keeps_types=True)
def castlike_to_cast(g: OptGraph, ctx: PassContext) -> int:
    """CastLike whose target's element type is known becomes the Cast it stands for (its
    `saturate` kept), as onnxruntime's saved optimized models have it; the target input is
    no longer read."""
    changes = 0
    for n in g.nodes:
        if n.op_type != "CastLike" or n.domain not in ("", "ai.onnx") or len(n.input) < 2:
            continue
        to = g.elem_type(n.input[1])
        if to is None:
            continue
        n.op_type = "Cast"
        del n.input[1:]
        n.attribute.append(helper.make_attribute("to", to))
        changes += 1
    return changes


@graph_pass("eliminate_noops", Level.BASIC)
def eliminate_noops(g: OptGraph, ctx: PassContext) -> int:
    """Identity, inference Dropout (its mask unread), same-type Cast, identity Transpose and
    shape-preserving Reshape/Squeeze/Unsqueeze/Flatten/Expand (static shapes, or by the
    value's own Shape, or Expand by ones); Squeeze/Unsqueeze pairs and shape-op chains that
    end where they started; Reshape after Reshape."""
    changes = 0
    prod = g.producers()
    names_read: set[str] = set()

    def read() -> set[str]:  # names something reads, found when a Dropout first asks
        if not names_read:
            names_read.update(x for m in g.nodes for x in m.input)
            names_read.update(g.protected | g.subgraph_reads() | {""})
        return names_read

    for n in list(g.nodes):
        if _is_noop(g, n, prod, read):
            source = n.input[0]
        elif n.op_type in _REORDER_FREE and n.domain in ("", "ai.onnx") and n.input[0]:
            source = _undone(g, n, prod) or ""
        else:
            continue
        if source and g.replace_value(n.output[0], source):
            g.remove(n)
            changes += 1
            # keep `prod` current: either the readers moved, or source's producer was renamed
            renamed = prod.get(source)
            if renamed is not None and n.output[0] in renamed.output:
                prod[n.output[0]] = prod.pop(source)
            else:
                prod.pop(n.output[0], None)
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
    if not n.attribute:  # most nodes: nothing to sort or serialize
        return (n.domain or "", n.op_type, tuple(n.input), len(n.output), ())
    attrs = []
    for a in sorted(n.attribute, key=lambda a: a.name):
        if a.type in (a.GRAPH, a.GRAPHS):
            return None
        attrs.append(a.SerializeToString(deterministic=True))
    return (n.domain or "", n.op_type, tuple(n.input), len(n.output), tuple(attrs))


@graph_pass("eliminate_common_subexpressions", Level.BASIC, keeps_types=True)
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
