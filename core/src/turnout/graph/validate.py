"""Type checks that onnxruntime makes at load and onnx.checker does not.

onnx.checker looks at each node alone; onnxruntime also checks that every value a node reads has
a type its op schema allows at the model's opset, that inputs sharing a type parameter agree,
and that a declared output type is what the node produces. Without these checks turnout ran
`Add(string, string)` or `Add(float, int64)`, which onnxruntime refuses. The checks follow
onnxruntime's `Graph::InferAndVerifyTypeMatch`, error classes included: a type outside the
schema is `InvalidGraph`; a type parameter bound to two types, or an output that differs from
its declaration, is `Fail`; inside a subgraph (If/Loop/Scan bodies) every type error is `Fail`.
As there, a used value declared with an undefined element type is `InvalidArgument` and an
untyped graph input is `Fail`.

Types come from the model's declarations plus onnx shape inference *without* data propagation
(which computes values, and a model can make those huge), run on a copy that holds no big
initializer bytes. Ops with no onnx schema (turnout's own, plugin and com.microsoft domains)
are not checked.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto

from turnout.graph import contrib
from turnout.graph.errors import Fail, InvalidArgument, InvalidGraph
from turnout.graph.light_copy import light_copy

__all__ = ["check_types"]

_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic
_SMALL_ELEMENTS = 1024  # initializers up to this size stay in the inference copy as they are


def check_types(model: ModelProto, label: str) -> None:
    """Refuse `model` (local functions already inlined) where onnxruntime refuses its types.

    :raises InvalidArgument: a used value is declared with an undefined element type.
    :raises InvalidGraph: a node input's type is not one its op schema allows.
    :raises Fail: an untyped graph input, a type parameter bound to two types, a declared
        output type that differs from what the node produces, or any type error in a subgraph.
    """
    g = model.graph
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name not in inits and not _has_type(vi):
            raise Fail(f"{label}: graph input {vi.name!r} has no type")
    contrib.register_for(model)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    checker = _Checker(label, opsets)
    light = _light(model, opsets)
    inferred, shape_error = _inferred_strictly(light)
    checker.graph(g, inferred.graph, {}, None)  # type errors first: they have their own classes
    if shape_error:
        raise Fail(f"{label}: shape inference: {shape_error}")


def _inferred_strictly(light: ModelProto) -> tuple[ModelProto, str | None]:
    """The inferred copy, and the first node whose own shape inference fails (incompatible
    dims for Add, MatMul, ...), which onnxruntime refuses while it resolves the graph. One
    strict pass in the usual case; a lenient one for the types when the strict one fails. The
    declared types of node outputs are already gone from `light`, so a declared shape that
    disagrees is no error (onnxruntime merges those leniently)."""
    try:
        return onnx.shape_inference.infer_shapes(light, strict_mode=True, data_prop=False), None
    except onnx.shape_inference.InferenceError as e:
        _, _, errors = str(e).partition("Inference error(s): ")
        own = [line for line in errors.splitlines() if _node_own_error(line)]
        return _inferred(light), own[0] if own else None
    except Exception:  # what onnx cannot infer at all is checked on declared types only
        return light, None


def _node_own_error(line: str) -> bool:
    """Whether one line of onnx's inference errors is a node's own failure: not one inside a
    function op's body (onnx's expansion, which onnxruntime does not run), and not a node that
    failed only because an earlier one left its input untyped."""
    return (
        line.startswith("(op_type:")
        and "Inference error(s)" not in line
        and "expected to have type but instead is null" not in line
    )


def _has_type(vi: ValueInfoProto) -> bool:
    return vi.HasField("type") and vi.type.WhichOneof("value") is not None


# ------------------------------------------------------------------ inference
def _light(model: ModelProto, opsets: dict[str, int]) -> ModelProto:
    """A copy for inference whose big initializers are typed inputs (no bytes) and whose node
    outputs carry no declared types where onnx knows the node, so that what a node produces is
    seen apart from what the model says it produces."""
    declared = {vi.name for vi in model.graph.input}
    big: list[TensorProto] = []

    def keep_small(t: TensorProto) -> TensorProto | None:
        if t.name in declared or math.prod(t.dims) <= _SMALL_ELEMENTS:
            return t
        big.append(t)
        return None

    light = light_copy(model, keep_small)
    for t in big:
        vi = light.graph.input.add()
        vi.name = t.name
        tt = vi.type.tensor_type
        tt.elem_type = t.data_type
        shape = tt.shape
        for d in t.dims:
            shape.dim.add().dim_value = d
    _strip_inferable(light.graph, opsets)
    return light


def _inferred(light: ModelProto) -> ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=False)
    except Exception:  # a model onnx cannot infer is checked on its declared types only
        return light


def _strip_inferable(g: GraphProto, opsets: dict[str, int]) -> None:
    """Drop the declared types of values made by nodes with an onnx schema, in `g` and in its
    subgraphs (a copy's: this edits `g`). A graph output that no node of `g` makes (a Loop
    body passing an input straight through) keeps its type: onnx could not infer it again."""
    made: set[str] = set()
    for node in g.node:
        if _signature(_domain(node), node.op_type, opsets.get(_domain(node), 0)) is not None:
            made.update(node.output)
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                _strip_inferable(a.g, opsets)
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _strip_inferable(sub, opsets)
    keep = [vi for vi in g.value_info if vi.name not in made]
    del g.value_info[:]
    g.value_info.extend(keep)
    for vi in g.output:
        if vi.name in made:
            vi.ClearField("type")


def _domain(node: NodeProto) -> str:
    return "" if node.domain == "ai.onnx" else node.domain


# ------------------------------------------------------------------ schemas
@dataclass(frozen=True)
class _Formal:
    name: str
    type_str: str  # a type parameter ("T") or a type ("tensor(int64)")
    allowed: frozenset[str]
    variadic: bool
    homogeneous: bool


@dataclass(frozen=True)
class _Signature:
    op: str  # "Add-14": the op and the since-version of its schema
    inputs: tuple[_Formal, ...]
    outputs: tuple[_Formal, ...]


@functools.lru_cache(maxsize=4096)
def _signature(domain: str, op_type: str, opset: int) -> _Signature | None:
    """The schema of `op_type` in force at `opset` of `domain`, with canonical type strings."""
    if opset <= 0:
        return None
    contrib.register_for_op(domain, op_type, opset)
    try:
        s = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    params = {
        tc.type_param_str: frozenset(_canonical(t) for t in tc.allowed_type_strs)
        for tc in s.type_constraints
    }

    def formal(p: onnx.defs.OpSchema.FormalParameter) -> _Formal:
        allowed = params.get(p.type_str, frozenset({_canonical(p.type_str)}))
        return _Formal(p.name, p.type_str, allowed, p.option == _VARIADIC, p.is_homogeneous)

    return _Signature(
        f"{op_type}-{s.since_version}",
        tuple(formal(p) for p in s.inputs),
        tuple(formal(p) for p in s.outputs),
    )


def _canonical(type_str: str) -> str:
    """A schema's type string as `_type_str` writes a TypeProto, which is how onnxruntime
    prints it: "map(int64, float)" is "map(int64,tensor(float))"."""
    s = type_str.replace(" ", "")
    kind, _, rest = s.partition("(")
    if kind in ("seq", "optional"):
        return f"{kind}({_canonical(rest[:-1])})"
    if kind == "map":
        key, _, value = rest[:-1].partition(",")
        return f"map({key},{_canonical(value if '(' in value else f'tensor({value})')})"
    return s


_ELEM = {code: name.lower() for name, code in TensorProto.DataType.items() if code}


def _type_str(tp: onnx.TypeProto) -> str | None:
    """onnxruntime's name of a type ("tensor(float)", "seq(tensor(int64))"); None where some
    part is undefined."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        e = _ELEM.get(tp.tensor_type.elem_type)
        return f"tensor({e})" if e else None
    if kind == "sequence_type":
        inner = _type_str(tp.sequence_type.elem_type)
        return f"seq({inner})" if inner else None
    if kind == "optional_type":
        inner = _type_str(tp.optional_type.elem_type)
        return f"optional({inner})" if inner else None
    if kind == "map_type":
        key = _ELEM.get(tp.map_type.key_type)
        value = _type_str(tp.map_type.value_type)
        return f"map({key},{value})" if key and value else None
    if kind == "sparse_tensor_type":
        e = _ELEM.get(tp.sparse_tensor_type.elem_type)
        return f"sparse_tensor({e})" if e else None
    return None


# ------------------------------------------------------------------ the walk
class _Checker:
    """Walks graphs in node order, knowing the type of every visible value as ORT resolves it."""

    def __init__(self, label: str, opsets: dict[str, int]) -> None:
        self.label = label
        self.opsets = opsets

    def graph(
        self, g: GraphProto, inferred: GraphProto, outer: dict[str, str], owner: str | None
    ) -> None:
        """Check `g`; `inferred` is the same graph after onnx inference, `outer` the types of
        the enclosing scope, `owner` the node whose subgraph `g` is (None: the main graph)."""
        undefined: list[str] = []
        env = dict(outer)
        if owner is not None:
            env.update(_types(inferred.input, []))  # onnx types untyped Loop/Scan body inputs
        env.update(_types(g.input, undefined))
        for t in g.initializer:
            if t.name not in env and t.data_type in _ELEM:
                env[t.name] = f"tensor({_ELEM[t.data_type]})"
        for sp in g.sparse_initializer:  # onnxruntime makes these dense at load
            if sp.values.name not in env and sp.values.data_type in _ELEM:
                env[sp.values.name] = f"tensor({_ELEM[sp.values.data_type]})"
        declared = _types(g.value_info, undefined)
        declared.update(_types(g.output, undefined))
        if undefined:
            self._undefined(g, undefined)
        found = _types(inferred.value_info, [])
        found.update(_types(inferred.output, []))
        for i, (node, inode) in enumerate(zip(g.node, inferred.node, strict=True)):
            sig = _signature(_domain(node), node.op_type, self.opsets.get(_domain(node), 0))
            if sig is not None:
                # onnxruntime makes a Constant an initializer, whatever its output declares
                own = {} if node.op_type == "Constant" and _domain(node) == "" else declared
                self._node(node, sig, env, own, found, (i, g, owner))
            else:
                for o in node.output:
                    t = found.get(o) or declared.get(o)
                    if o and t is not None:
                        env[o] = t
            for a, ia in zip(node.attribute, inode.attribute, strict=True):
                if a.type == AttributeProto.GRAPH:
                    self.graph(a.g, ia.g, env, self._where(node, i, g, owner))
                elif a.type == AttributeProto.GRAPHS:
                    for sub, isub in zip(a.graphs, ia.graphs, strict=True):
                        self.graph(sub, isub, env, self._where(node, i, g, owner))

    def _undefined(self, g: GraphProto, names: list[str]) -> None:
        """ORT types every graph input, output and node argument as it builds the graph, and
        fails on an undefined element type there; value_info of unused names is ignored."""
        used = {vi.name for vi in g.input} | {vi.name for vi in g.output}
        for node in g.node:
            used.update(node.input)
            used.update(node.output)
        for name in names:
            if name in used:
                raise InvalidArgument(
                    f"{self.label}: value {name!r} of graph {g.name!r} is declared with an "
                    "undefined element type"
                )

    def _where(self, node: NodeProto, index: int, g: GraphProto, owner: str | None) -> str:
        what = f"node {node.name!r}" if node.name else f"node #{index}"
        what += f" ({node.op_type})"
        return what if owner is None else f"{what} in graph {g.name!r} of {owner}"

    def _node(
        self,
        node: NodeProto,
        sig: _Signature,
        env: dict[str, str],
        declared: dict[str, str],
        found: dict[str, str],
        at: tuple[int, GraphProto, str | None],
    ) -> None:
        bound: dict[str, tuple[str, str]] = {}  # type parameter -> (type, the input binding it)
        for i, name in enumerate(node.input):
            t = env.get(name) if name else None
            f = _formal(sig.inputs, i)
            if f is None or t is None:
                continue  # arity is onnx.checker's to report; an unknown type is not checked
            if t not in f.allowed:
                error = InvalidGraph if at[2] is None else Fail  # ORT: FAIL inside subgraphs
                raise error(
                    f"{self.label}: {self._where(node, *at)}: input {name!r} ({f.name}) has "
                    f"type {t}, which {sig.op} does not allow there; allowed: "
                    + ", ".join(sorted(f.allowed))
                )
            if f.homogeneous:
                prev = bound.setdefault(f.type_str, (t, name))
                if prev[0] != t:
                    raise Fail(
                        f"{self.label}: {self._where(node, *at)}: type parameter {f.type_str} "
                        f"of {sig.op} is bound to {prev[0]} by input {prev[1]!r} and to {t} by "
                        f"input {name!r}"
                    )
        for i, name in enumerate(node.output):
            if not name:
                continue
            want = declared.get(name)
            t = _produced(_formal(sig.outputs, i), bound, found.get(name))
            if t is None:
                if want is not None:
                    env[name] = want
                continue
            if want is not None and want != t:
                raise Fail(
                    f"{self.label}: {self._where(node, *at)}: output {name!r} is declared "
                    f"{want}, but the node produces {t}"
                )
            env[name] = t


def _types(infos: Iterable[ValueInfoProto], undefined: list[str]) -> dict[str, str]:
    """Type strings of the typed values among `infos`; names whose declared type has an
    undefined part go to `undefined` (an untyped value is neither)."""
    out = {}
    for vi in infos:
        if not vi.HasField("type"):
            continue
        t = _type_str(vi.type)
        if t is not None:
            out[vi.name] = t
        elif vi.type.WhichOneof("value") is not None:
            undefined.append(vi.name)
    return out


def _formal(formals: tuple[_Formal, ...], i: int) -> _Formal | None:
    if i < len(formals):
        return formals[i]
    if formals and formals[-1].variadic:
        return formals[-1]
    return None


def _produced(
    f: _Formal | None, bound: dict[str, tuple[str, str]], inferred: str | None
) -> str | None:
    """The type ORT gives a node output: its bound type parameter, else the one type the schema
    allows, else onnx's inferred type (None: unknown, and the declaration is kept)."""
    if f is not None:
        if f.homogeneous and f.type_str in bound:
            return bound[f.type_str][0]
        if len(f.allowed) == 1:
            return next(iter(f.allowed))
    return inferred
