"""onnx shape inference with data propagation, without letting it materialize huge tensors.

Data propagation is what learns a Reshape's output shape from a Shape -> Gather -> Concat chain,
so turnout wants it. But onnx's data propagators (Add, Cast, Size, Gather, ...) walk every
element of their inputs, whatever their size: a 97-byte `ConstantOfShape([2**24]) -> Add` took
10 s and 2.6 GB. Shape data is small, so the data-propagating pass here runs on a copy of the
graph without the data-propagating nodes that touch a value not known to be small; their
outputs come in as typed inputs, with the types a first pass without data propagation found.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache

import onnx
from onnx import GraphProto, ModelProto, TypeProto, ValueInfoProto

from turnout.graph import contrib
from turnout.graph.errors import InvalidGraph

__all__ = [
    "SHAPE_DATA_MAX_ELEMENTS",
    "infer_value_types",
    "infer_with_bounded_data_prop",
    "refuse_oversized_values",
]

# the largest value data propagation may read: shape tensors have one element per dim
SHAPE_DATA_MAX_ELEMENTS = 4096


def infer_with_bounded_data_prop(
    model: ModelProto, max_elements: int = SHAPE_DATA_MAX_ELEMENTS
) -> ModelProto:
    """The model with onnx's inferred types (strict_mode off), data propagation bounded.

    Raises what onnx raises; the callers decide whether a model it cannot infer still runs.
    """
    contrib.register_for(model)
    plain = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=False)
    sizes = _static_sizes(plain)
    opsets = {_domain(o.domain): o.version for o in model.opset_import}
    nodes = model.graph.node
    propagating = [
        i
        for i, n in enumerate(nodes)
        if _propagates_data(_domain(n.domain), n.op_type, opsets.get(_domain(n.domain), 0))
    ]
    cut = {
        i
        for i in propagating
        if nodes[i].op_type != "Shape"  # reads only its input's shape
        and any(
            x and (sizes.get(x) is None or sizes[x] > max_elements)  # type: ignore[operator]
            for x in (*nodes[i].input, *nodes[i].output)
        )
    }
    if not cut:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    if len(cut) == len(propagating) and not any(map(_has_graph, nodes)):
        # no node left to propagate data: the second pass would infer what the first did
        return plain
    return _infer_around(model, plain, cut)


def _has_graph(n: onnx.NodeProto) -> bool:
    return any(a.type in (a.GRAPH, a.GRAPHS) for a in n.attribute)


def infer_value_types(
    model: ModelProto,
    max_elements: int = SHAPE_DATA_MAX_ELEMENTS,
    prior: Mapping[str, TypeProto] | None = None,
) -> dict[str, TypeProto]:
    """The types of the top graph's values (inputs, value_info, outputs) that
    `infer_with_bounded_data_prop` finds, by name.

    `prior` holds types an earlier inference found for the same names (the optimizer's
    previous refresh). When it sizes every value a data-propagating node touches, it decides
    which nodes to leave out, and types their outputs, in place of the plain inference pass:
    one onnx pass instead of two. Otherwise this is `infer_with_bounded_data_prop`.
    """
    contrib.register_for(model)
    cut = _cut_from(model, max_elements, prior) if prior else None
    if cut is None:
        return _types_of(infer_with_bounded_data_prop(model, max_elements).graph)
    if not cut:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        return _types_of(inferred.graph)
    assert prior is not None
    cut_outputs = {o: prior[o] for i in cut for o in model.graph.node[i].output if o}
    light = _without_nodes(model, cut)
    light.graph.input.extend(_value_info(o, tp) for o, tp in cut_outputs.items())
    inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    types = _types_of(inferred.graph)
    types.update(cut_outputs)
    return types


def _value_info(name: str, tp: TypeProto) -> ValueInfoProto:
    vi = ValueInfoProto(name=name)
    vi.type.CopyFrom(tp)
    return vi


def _types_of(g: GraphProto) -> dict[str, TypeProto]:
    return {
        vi.name: vi.type
        for vi in (*g.input, *g.value_info, *g.output)
        if vi.type.WhichOneof("value") is not None
    }


def _cut_from(
    model: ModelProto, max_elements: int, prior: Mapping[str, TypeProto]
) -> set[int] | None:
    """The nodes data propagation must leave out, sized from `prior`; None when `prior` does
    not size a value that decides it (a plain inference pass must size it)."""
    sizes: dict[str, int | None] = {}
    for vi in model.graph.input:
        sizes[vi.name] = _size(vi.type)
    for t in model.graph.initializer:
        sizes[t.name] = math.prod(t.dims)
    opsets = {_domain(o.domain): o.version for o in model.opset_import}
    cut: set[int] = set()
    for i, n in enumerate(model.graph.node):
        domain = _domain(n.domain)
        if n.op_type == "Shape" or not _propagates_data(domain, n.op_type, opsets.get(domain, 0)):
            continue
        for x in (*n.input, *n.output):
            if not x:
                continue
            size = sizes[x] if x in sizes else _size(prior[x]) if x in prior else None
            if size is None:
                return None
            if size > max_elements:
                cut.add(i)
        if i in cut and not all(o in prior for o in n.output if o):
            return None
    return cut


def _size(tp: TypeProto) -> int | None:
    """The element count of a tensor type with a static shape, else None."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim]
    return None if None in dims else math.prod(dims)  # type: ignore[arg-type]


def _infer_around(model: ModelProto, plain: ModelProto, cut: set[int]) -> ModelProto:
    """Data-propagating inference over `model` less the nodes in `cut`, merged into `plain`
    (which is returned, edited in place: it is the caller's own inference result)."""
    known = {vi.name: vi for vi in (*plain.graph.value_info, *plain.graph.output)}
    cut_outputs = [o for i in cut for o in model.graph.node[i].output if o]
    light = _without_nodes(model, cut)
    light.graph.input.extend(known[o] for o in cut_outputs if o in known)
    inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    types: dict[str, ValueInfoProto] = {vi.name: vi for vi in inferred.graph.value_info}
    types.update((vi.name, vi) for vi in inferred.graph.output)
    types.update((o, known[o]) for o in cut_outputs if o in known)
    # in the order of the first pass, then what only the second found
    first = {vi.name for vi in plain.graph.value_info}
    merged = [types.get(vi.name, vi) for vi in plain.graph.value_info]
    merged.extend(vi for vi in inferred.graph.value_info if vi.name not in first)
    merged = [_copy(vi) for vi in merged]  # some are elements of the list replaced next
    outputs = [_copy(types.get(o.name, o)) for o in plain.graph.output]
    g = plain.graph
    del g.value_info[:]
    g.value_info.extend(merged)
    del g.output[:]
    g.output.extend(outputs)
    # only nodes with nested graphs differ between the passes (their bodies' value_info)
    inferred_nodes = iter(inferred.graph.node)
    for i, n in enumerate(g.node):
        if i in cut:
            continue
        done = next(inferred_nodes)
        if any(a.type in (a.GRAPH, a.GRAPHS) for a in n.attribute):
            n.CopyFrom(done)
    return plain


def _without_nodes(model: ModelProto, cut: set[int]) -> ModelProto:
    """A copy of `model` without the nodes at the indices in `cut` (the rest not copied
    twice, as CopyFrom and deleting would)."""
    out = ModelProto()
    for fd, value in model.ListFields():
        if fd.name == "graph":
            continue
        if fd.is_repeated:
            getattr(out, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(out, fd.name).CopyFrom(value)
        else:
            setattr(out, fd.name, value)
    for fd, value in model.graph.ListFields():
        if fd.name == "node":
            continue
        if fd.is_repeated:
            getattr(out.graph, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(out.graph, fd.name).CopyFrom(value)
        else:
            setattr(out.graph, fd.name, value)
    out.graph.node.extend(n for i, n in enumerate(model.graph.node) if i not in cut)
    return out


def _copy(vi: ValueInfoProto) -> ValueInfoProto:
    out = ValueInfoProto()
    out.CopyFrom(vi)
    return out


def _static_sizes(model: ModelProto) -> dict[str, int | None]:
    """Element count of every typed tensor value of the top graph; None where not static."""
    g = model.graph
    out: dict[str, int | None] = {}
    for vi in (*g.input, *g.value_info, *g.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
            out[vi.name] = None
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        out[vi.name] = None if None in dims else math.prod(dims)  # type: ignore[arg-type]
    for t in g.initializer:
        out[t.name] = math.prod(t.dims)
    return out


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


@cache
def _propagates_data(domain: str, op_type: str, version: int) -> bool:
    """Whether onnx's schema of this op, at this opset, has a data-propagation function."""
    contrib.register_for_op(domain, op_type, version)
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_data_propagation_function)


def refuse_oversized_values(model: ModelProto, max_elements: int, label: str) -> None:
    """Refuse a model whose inferred static shapes hold a tensor over `max_elements` elements,
    naming the node that would produce it, before anything tries to allocate it."""
    sizes = _static_sizes(model)
    for n in model.graph.node:
        for o in n.output:
            size = sizes.get(o)
            if size is not None and size > max_elements:
                raise InvalidGraph(
                    f"{label}: node {n.name or n.op_type!r} ({n.op_type}) produces {o!r} with "
                    f"{size} elements, over the limit of {max_elements} "
                    "(session config entry session.turnout.max_tensor_elements)"
                )
