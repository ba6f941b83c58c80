"""Symbolic shape inference, as `onnxruntime.tools.symbolic_shape_infer` offers it.

    python -m turnout.tools.symbolic_shape_infer --input in.onnx --output out.onnx \\
        [--auto_merge] [--int_max N] [--guess_output_rank] [--verbose N]

    from turnout.tools.symbolic_shape_infer import SymbolicShapeInference
    inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True)

Every value gets a type in `value_info` whose dims are numbers or symbols: the graph inputs'
named dims (`batch`, `seq`) carried through the graph, expressions of them where a dim is
computed (`batch*seq` for a Reshape to [-1, H], `2*seq` for a Concat on that axis) and a fresh
`unk__N` where nothing better is known. Each node's types come from onnx's own inference for its
schema (with turnout's `com.microsoft` schemas registered, so `Attention`,
`SkipLayerNormalization`, `EmbedLayerNormalization`, ... are inferred too), refined here where a
dim is computed from shape values: small integer tensors (`Shape -> Gather -> Concat` chains,
constants) are tracked element by element as numbers and symbol expressions, and Reshape,
Expand, ConstantOfShape, Tile, Concat and Slice read them.

As onnxruntime's tool: a model of opset below 7 is refused with a warning (`None` is returned);
a node whose output types cannot be inferred raises "Incomplete symbolic shape inference"
(unlike onnxruntime, no `sym_shape_infer_temp.onnx` is written to the working directory);
`guess_output_rank` gives an unknown op's outputs input 0's type and rank; `auto_merge` makes two
different symbols met in one broadcast or Concat the same symbol; `int_max` is the Slice bound
read as "to the end". Nested graphs (If, Loop, Scan) keep the types onnx's whole-model inference
gives them.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto, TypeProto, ValueInfoProto

from turnout.graph import contrib
from turnout.graph.shape_inference import infer_with_bounded_data_prop

contrib.register()  # the com.microsoft schemas, known to onnx before any model is inferred

__all__ = ["SymbolicShapeInference", "get_opset", "main"]

logger = logging.getLogger(__name__)

# a monomial: its symbols, sorted, repeated for powers; () is the constant term
Monomial = tuple[str, ...]
# small integer tensors (shape values) longer than this are not tracked element by element
_MAX_TRACKED = 64
_INT_TYPES = {TensorProto.INT64, TensorProto.INT32}


class Poly:
    """A polynomial in dim symbols with integer coefficients: what a computed dim is."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[Monomial, int]) -> None:
        self.terms = {m: c for m, c in terms.items() if c}

    @staticmethod
    def symbol(name: str) -> Poly:
        return Poly({(name,): 1})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def __str__(self) -> str:
        order = sorted(self.terms, key=lambda m: (-len(m), m))
        text = ""
        for m in order:
            c = self.terms[m]
            body = _monomial_text(m)
            word = body if abs(c) == 1 and m else f"{abs(c)}*{body}" if m else str(abs(c))
            text += (" - " if c < 0 else " + ") + word if text else ("-" if c < 0 else "") + word
        return text

    __repr__ = __str__


def _monomial_text(m: Monomial) -> str:
    return "*".join(s if m.count(s) == 1 else f"{s}**{m.count(s)}" for s in dict.fromkeys(m))


def _terms(d: int | Poly) -> dict[Monomial, int]:
    return dict(d.terms) if isinstance(d, Poly) else ({(): d} if d else {})


def _dim(terms: dict[Monomial, int]) -> int | Poly:
    p = Poly(terms)
    if not p.terms:
        return 0
    if list(p.terms) == [()]:
        return p.terms[()]
    return p


def add(a: int | Poly, b: int | Poly, sign: int = 1) -> int | Poly:
    t = _terms(a)
    for m, c in _terms(b).items():
        t[m] = t.get(m, 0) + sign * c
    return _dim(t)


def mul(a: int | Poly, b: int | Poly) -> int | Poly:
    t: dict[Monomial, int] = {}
    for ma, ca in _terms(a).items():
        for mb, cb in _terms(b).items():
            m = tuple(sorted(ma + mb))
            t[m] = t.get(m, 0) + ca * cb
    return _dim(t)


def div(a: int | Poly, b: int | Poly) -> int | Poly | None:
    """a / b when b is a monomial dividing every term of a exactly; else None."""
    tb = _terms(b)
    if len(tb) != 1:
        return None
    (mb, cb), out = next(iter(tb.items())), {}
    for m, c in _terms(a).items():
        rest = list(m)
        for s in mb:
            if s not in rest:
                return None
            rest.remove(s)
        if c % cb:
            return None
        out[tuple(rest)] = c // cb
    return _dim(out)


def product(dims: Iterable[int | Poly]) -> int | Poly:
    out: int | Poly = 1
    for d in dims:
        out = mul(out, d)
    return out


def get_opset(model: ModelProto, domain: str | Sequence[str] = ("", "ai.onnx")) -> int | None:
    """The model's opset for `domain` (the default ONNX domain by default), None if absent."""
    domains = [domain] if isinstance(domain, str) else list(domain)
    for o in model.opset_import:
        if o.domain in domains:
            return int(o.version)
    return None


class _Value:
    """A small integer tensor's elements: numbers and symbol expressions (shape values)."""

    __slots__ = ("items", "scalar")

    def __init__(self, items: list[int | Poly], scalar: bool = False) -> None:
        self.items = items
        self.scalar = scalar


class SymbolicShapeInference:
    """onnxruntime's `SymbolicShapeInference`: call `infer_shapes(model, ...)`."""

    def __init__(
        self,
        int_max: int = 2**31 - 1,
        auto_merge: bool = False,
        guess_output_rank: bool = False,
        verbose: int = 0,
        prefix: str = "",
    ) -> None:
        self.int_max_ = int_max
        self.auto_merge_ = auto_merge
        self.guess_output_rank_ = guess_output_rank
        self.verbose_ = verbose
        self.prefix_ = prefix
        self._types: dict[str, TypeProto] = {}
        self._values: dict[str, _Value] = {}
        self._symbols: dict[str, int | Poly] = {}  # dim_param -> its dim (merges included)
        self._merged: dict[str, int | Poly] = {}  # symbol -> what auto_merge made it
        self._used: set[str] = set()
        self._conflicts: list[str] = []  # values whose dims met different symbols
        self._fresh = 0
        self._whole: dict[str, TypeProto] | None = None
        self._opsets: dict[str, int] = {}
        self._opset_import: list[onnx.OperatorSetIdProto] = []
        self.out_mp_: ModelProto | None = None

    # -- the entry point ------------------------------------------------------------------

    @staticmethod
    def infer_shapes(
        in_mp: ModelProto,
        int_max: int = 2**31 - 1,
        auto_merge: bool = False,
        guess_output_rank: bool = False,
        verbose: int = 0,
    ) -> ModelProto | None:
        """`in_mp` with every value's type and symbolic shape in `value_info` (a new model;
        `in_mp` is not changed). None, with a warning, for a model of opset below 7."""
        opset = get_opset(in_mp)
        if not opset or opset < 7:
            logger.warning("Only support models of onnx opset 7 and above.")
            return None
        inference = SymbolicShapeInference(int_max, auto_merge, guess_output_rank, verbose)
        return inference._run(in_mp)

    def _run(self, in_mp: ModelProto) -> ModelProto:
        out = ModelProto()
        out.CopyFrom(in_mp)
        self.out_mp_ = out
        self._opset_import = list(out.opset_import)
        g = out.graph
        self._opsets = {
            ("" if o.domain == "ai.onnx" else o.domain): o.version for o in out.opset_import
        }
        for vi in (*g.input, *g.value_info, *g.output):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param"):
                    self._used.add(d.dim_param)
        for t in g.initializer:
            self._types[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
            self._track_constant(t.name, t)
        for vi in g.input:
            self._types[vi.name] = self._normalized(vi.type)
            self._values.pop(vi.name, None)  # an input that has a default may be fed anything
        missing: list[str] = []
        for index, node in enumerate(g.node):
            self._infer_node(node, index)
            missing += [o for o in node.output if o and o not in self._types]
        missing += self._conflicts
        if missing:
            raise Exception(  # onnxruntime's tool raises a plain Exception here
                f"Incomplete symbolic shape inference: no type for {missing[:10]}"
            )
        self._write(out)
        return out

    # -- per node ------------------------------------------------------------------------

    def _infer_node(self, node: NodeProto, index: int) -> None:
        types = self._onnx_types(node)
        if (
            types is None
            and self.guess_output_rank_
            and node.input
            and node.input[0] in self._types
        ):
            types = {o: self._guessed(node, index, k) for k, o in enumerate(node.output) if o}
            logger.warning("%s: guessing its outputs' rank from input 0", _label(node))
        if types is None:
            logger.warning("%s: no output type could be inferred", _label(node))
            return
        for name, tp in types.items():
            self._types[name] = self._normalized(tp)
        refine = _REFINE.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if refine is not None:
            refine(self, node)
        self._propagate_value(node)
        if self.verbose_ >= 3:
            for o in node.output:
                if o in self._types:
                    logger.info("%s: %s %s", _label(node), o, self._shape(o))

    def _guessed(self, node: NodeProto, index: int, k: int) -> TypeProto:
        """Input 0's type with fresh dims of its rank, named as onnxruntime's tool names them."""
        tp = TypeProto()
        tp.CopyFrom(self._types[node.input[0]])
        if tp.HasField("tensor_type") and tp.tensor_type.HasField("shape"):
            for i, d in enumerate(tp.tensor_type.shape.dim):
                d.dim_param = f"{node.op_type}_{index}_o{k}__d{i}"
        return tp

    def _onnx_types(self, node: NodeProto) -> dict[str, TypeProto] | None:
        """The node's output types from onnx's inference for its schema; from onnx's
        whole-model inference for nodes holding graphs or without a schema."""
        has_graph = any(a.type in (a.GRAPH, a.GRAPHS) for a in node.attribute)
        if not has_graph:
            domain = "" if node.domain == "ai.onnx" else node.domain
            try:
                schema = onnx.defs.get_schema(node.op_type, self._opsets.get(domain, 1), domain)
                inputs = {i: self._types[i] for i in node.input if i in self._types}
                data = {i: self._as_tensor(i) for i in node.input if i in self._values}
                out = onnx.shape_inference.infer_node_outputs(
                    schema,
                    node,
                    inputs,
                    {i: t for i, t in data.items() if t is not None},
                    opset_imports=self._opset_import,
                )
            except Exception as e:
                logger.debug("%s: onnx's node inference failed: %s", _label(node), e)
            else:
                if all(o in out for o in node.output if o):
                    return out
        whole = self._whole_model_types()
        found = {o: whole[o] for o in node.output if o in whole}
        return found if all(o in found for o in node.output if o) and found else None

    def _whole_model_types(self) -> dict[str, TypeProto]:
        if self._whole is None:
            assert self.out_mp_ is not None
            try:
                inferred = infer_with_bounded_data_prop(self.out_mp_).graph
            except Exception as e:
                logger.debug("onnx's whole-model inference failed: %s", e)
                self._whole = {}
            else:
                self._whole = {vi.name: vi.type for vi in (*inferred.value_info, *inferred.output)}
        return self._whole

    # -- dims ----------------------------------------------------------------------------

    def _new_symbol(self) -> Poly:
        while f"unk__{self._fresh}" in self._used:
            self._fresh += 1
        name = f"unk__{self._fresh}"
        self._used.add(name)
        return Poly.symbol(name)

    def _parse(self, d: onnx.TensorShapeProto.Dimension) -> int | Poly:
        if d.HasField("dim_value"):
            return int(d.dim_value)
        if d.HasField("dim_param") and d.dim_param:
            text = d.dim_param
            dim = self._symbols.get(text)
            if dim is None:
                dim = Poly.symbol(text)
                self._symbols[text] = dim
            return self._resolve(dim)
        return self._new_symbol()

    def _resolve(self, dim: int | Poly) -> int | Poly:
        if isinstance(dim, Poly) and len(dim.terms) == 1:
            ((m, c),) = dim.terms.items()
            if c == 1 and len(m) == 1 and m[0] in self._merged:
                return self._resolve(self._merged[m[0]])
        return dim

    def _shape(self, name: str) -> list[int | Poly] | None:
        tp = self._types.get(name)
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            return None
        return [self._parse(d) for d in tp.tensor_type.shape.dim]

    def _normalized(self, tp: TypeProto) -> TypeProto:
        """`tp` with every unknown dim a fresh symbol and every dim in canonical spelling."""
        out = TypeProto()
        out.CopyFrom(tp)
        if out.HasField("tensor_type") and out.tensor_type.HasField("shape"):
            dims = [self._parse(d) for d in out.tensor_type.shape.dim]
            _set_dims(out, dims, self._symbols)
        return out

    def _set_shape(self, name: str, dims: Sequence[int | Poly | None]) -> None:
        tp = self._types[name]
        _set_dims(tp, [self._new_symbol() if d is None else d for d in dims], self._symbols)

    def _merge(self, a: int | Poly, b: int | Poly, where: str) -> int | Poly | None:
        """The dim two dims must both be (1 broadcast away first). When they differ: with
        auto_merge, a plain symbol is made the other dim (a number first, else `a`); without,
        None, and `where` is an unresolved value, as in onnxruntime's tool."""
        if a == b or b == 1:
            return a
        if a == 1:
            return b
        if not self.auto_merge_:
            logger.warning("%s: unsupported broadcast between %s and %s", where, a, b)
            self._conflicts.append(where)
            return None
        for x, y in ((b, a), (a, b)) if isinstance(b, Poly) else ((a, b),):
            if isinstance(x, Poly) and len(x.terms) == 1:
                ((m, c),) = x.terms.items()
                if c == 1 and len(m) == 1:
                    self._merged[m[0]] = y
                    logger.warning("auto_merge: %s is taken to be %s", m[0], y)
                    return y
        return None

    # -- shape values --------------------------------------------------------------------

    def _track_constant(self, name: str, t: TensorProto) -> None:
        if t.data_type in _INT_TYPES and math.prod(t.dims) <= _MAX_TRACKED:
            a = onnx.numpy_helper.to_array(t)
            self._values[name] = _Value([int(x) for x in a.reshape(-1)], scalar=a.ndim == 0)

    def _as_tensor(self, name: str) -> TensorProto | None:
        v = self._values[name]
        if not all(isinstance(x, int) for x in v.items):
            return None
        a = np.array(v.items, dtype=np.int64)
        return onnx.numpy_helper.from_array(a.reshape(()) if v.scalar else a, name)

    def _ints(self, name: str) -> list[int] | None:
        v = self._values.get(name)
        if v is None or not all(isinstance(x, int) for x in v.items):
            return None
        return [x for x in v.items if isinstance(x, int)]

    def _propagate_value(self, node: NodeProto) -> None:
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            return
        out = node.output[0]
        tp = self._types.get(out)
        if tp is None or tp.tensor_type.elem_type not in _INT_TYPES:
            return
        fn = _VALUE.get(node.op_type)
        value = fn(self, node) if fn is not None else None
        if value is not None and len(value.items) <= _MAX_TRACKED:
            self._values[out] = value
            if not value.scalar and self._shape(out) is not None:
                self._set_shape(out, [len(value.items)])

    # -- the output model ----------------------------------------------------------------

    def _write(self, out: ModelProto) -> None:
        g = out.graph
        outputs = {o.name for o in g.output}
        inputs = {i.name for i in g.input} | {t.name for t in g.initializer}
        produced = [o for n in g.node for o in n.output if o and o not in inputs]
        kept = [vi for vi in g.value_info if vi.name not in self._types]
        del g.value_info[:]
        g.value_info.extend(kept)
        g.value_info.extend(self._value_info(o) for o in produced if o not in outputs)
        for vi in g.output:
            if vi.name in self._types:
                vi.type.CopyFrom(self._final(self._types[vi.name]))

    def _value_info(self, name: str) -> ValueInfoProto:
        return ValueInfoProto(name=name, type=self._final(self._types[name]))

    def _final(self, tp: TypeProto) -> TypeProto:
        """`tp` with auto_merge's merges applied."""
        return self._normalized(tp) if self._merged else tp


def _set_dims(tp: TypeProto, dims: Sequence[int | Poly], symbols: dict[str, int | Poly]) -> None:
    shape = tp.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        else:
            text = str(d)
            symbols.setdefault(text, d)
            dim.dim_param = text


def _label(node: NodeProto) -> str:
    return f"{node.op_type} node {node.name or node.output[0]!r}"


def _attr(node: NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


# -- shape values: what small integer tensors hold ----------------------------------------

_Infer = Callable[[SymbolicShapeInference, NodeProto], None]
_Propagate = Callable[[SymbolicShapeInference, NodeProto], "_Value | None"]


def _value_shape(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
    dims = s._shape(node.input[0])
    if dims is None:
        return None
    start, end = int(_attr(node, "start", 0)), _attr(node, "end", None)
    return _Value(dims[start : None if end is None else int(end)])


def _value_size(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
    dims = s._shape(node.input[0])
    return None if dims is None else _Value([product(dims)], scalar=True)


def _value_constant(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
    t = _attr(node, "value")
    if isinstance(t, TensorProto):
        s._track_constant(node.output[0], t)
        return s._values.get(node.output[0])
    return None


def _value_same(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
    return s._values.get(node.input[0])


def _value_gather(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
    data, idx = s._values.get(node.input[0]), s._values.get(node.input[1])
    if data is None or data.scalar or idx is None or int(_attr(node, "axis", 0)) != 0:
        return None
    picks = [i for i in idx.items if isinstance(i, int) and -len(data.items) <= i < len(data.items)]
    if len(picks) != len(idx.items):
        return None
    return _Value([data.items[i] for i in picks], scalar=idx.scalar)


def _value_concat(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
    parts = [s._values.get(i) for i in node.input]
    items: list[int | Poly] = []
    for p in parts:
        if p is None or p.scalar:
            return None
        items += p.items
    return _Value(items)


def _value_unsqueeze(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
    v = s._values.get(node.input[0])
    return _Value(list(v.items)) if v is not None and v.scalar else None


def _value_squeeze(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
    v = s._values.get(node.input[0])
    return _Value(list(v.items), scalar=True) if v is not None and len(v.items) == 1 else None


def _slice_args(
    s: SymbolicShapeInference, node: NodeProto, rank: int
) -> list[tuple[int, int, int, int]] | None:
    """(axis, start, end, step) per sliced axis, from the inputs (opset >= 10) or attributes."""
    if len(node.input) >= 3:
        starts, ends = s._ints(node.input[1]), s._ints(node.input[2])
        axes = s._ints(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        steps = s._ints(node.input[4]) if len(node.input) > 4 and node.input[4] else None
    else:
        starts, ends, axes, steps = (
            _attr(node, "starts"),
            _attr(node, "ends"),
            _attr(node, "axes"),
            None,
        )
    if starts is None or ends is None:
        return None
    axes = list(range(len(starts))) if axes is None else [a % rank if rank else a for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    return list(zip(axes, starts, ends, steps, strict=True))


def _value_slice(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
    v = s._values.get(node.input[0])
    args = _slice_args(s, node, 1) if v is not None and not v.scalar else None
    if v is None or not args or len(args) != 1:
        return None
    _, start, end, step = args[0]
    n = len(v.items)
    end = min(end, n) if end < s.int_max_ else n
    return _Value(v.items[slice(start, end, step)])


def _elementwise(op: Callable[[int | Poly, int | Poly], int | Poly | None]) -> _Propagate:
    def propagate(s: SymbolicShapeInference, node: NodeProto) -> _Value | None:
        a, b = s._values.get(node.input[0]), s._values.get(node.input[1])
        if a is None or b is None:
            return None
        n = max(len(a.items), len(b.items))
        if len(a.items) not in (1, n) or len(b.items) not in (1, n):
            return None
        items = []
        for i in range(n):
            x = op(a.items[i % len(a.items)], b.items[i % len(b.items)])
            if x is None:
                return None
            items.append(x)
        return _Value(items, scalar=a.scalar and b.scalar)

    return propagate


def _floor_div(a: int | Poly, b: int | Poly) -> int | Poly | None:
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b else None
    return div(a, b)


_VALUE: dict[str, _Propagate] = {
    "Shape": _value_shape,
    "Size": _value_size,
    "Constant": _value_constant,
    "Identity": _value_same,
    "Cast": _value_same,
    "Gather": _value_gather,
    "Concat": _value_concat,
    "Unsqueeze": _value_unsqueeze,
    "Squeeze": _value_squeeze,
    "Slice": _value_slice,
    "Add": _elementwise(add),
    "Sub": _elementwise(lambda a, b: add(a, b, -1)),
    "Mul": _elementwise(mul),
    "Div": _elementwise(_floor_div),
}


# -- output shapes computed from shape values ---------------------------------------------


def _refine_reshape(s: SymbolicShapeInference, node: NodeProto) -> None:
    v, dims = s._values.get(node.input[1]), s._shape(node.input[0])
    if v is None or v.scalar:
        return
    allow_zero = bool(_attr(node, "allowzero", 0))
    out: list[int | Poly | None] = [
        dims[i] if x == 0 and not allow_zero and dims is not None and i < len(dims) else x
        for i, x in enumerate(v.items)
    ]
    if -1 in out:
        known = product(d for d in out if d is not None and d != -1)
        out[out.index(-1)] = div(product(dims), known) if dims is not None else None
    s._set_shape(node.output[0], out)


def _refine_from_value(index: int) -> _Infer:
    """Expand, ConstantOfShape, Tile: the output dims read from input `index`'s value."""

    def refine(s: SymbolicShapeInference, node: NodeProto) -> None:
        v = s._values.get(node.input[index])
        if v is None or v.scalar:
            return
        if node.op_type == "ConstantOfShape":
            s._set_shape(node.output[0], v.items)
            return
        dims = s._shape(node.input[0])
        if dims is None:
            return
        if node.op_type == "Tile":
            if len(v.items) == len(dims):
                s._set_shape(
                    node.output[0], [mul(d, r) for d, r in zip(dims, v.items, strict=True)]
                )
            return
        n = max(len(dims), len(v.items))
        a = [1] * (n - len(dims)) + dims
        b = [1] * (n - len(v.items)) + v.items
        out = node.output[0]
        s._set_shape(out, [s._merge(x, y, out) for x, y in zip(a, b, strict=True)])

    return refine


def _refine_concat(s: SymbolicShapeInference, node: NodeProto) -> None:
    shapes = _shapes(s, node)
    if shapes is None or not shapes[0] or any(len(d) != len(shapes[0]) for d in shapes):
        return
    axis = int(_attr(node, "axis", 0)) % len(shapes[0])
    total: int | Poly = 0
    for d in shapes:
        total = add(total, d[axis])
    out = [
        total if i == axis else _merged(s, node, [d[i] for d in shapes])
        for i in range(len(shapes[0]))
    ]
    s._set_shape(node.output[0], out)


def _shapes(s: SymbolicShapeInference, node: NodeProto) -> list[list[int | Poly]] | None:
    """The node's inputs' shapes (absent optional inputs left out), None if one is unknown."""
    out = []
    for i in node.input:
        if i:
            dims = s._shape(i)
            if dims is None:
                return None
            out.append(dims)
    return out


def _merged(
    s: SymbolicShapeInference, node: NodeProto, dims: list[int | Poly]
) -> int | Poly | None:
    """The dim that `dims` (one axis of several inputs) must all be."""
    dim: int | Poly | None = dims[0]
    for d in dims[1:]:
        dim = s._merge(dim, d, node.output[0]) if dim is not None else None
    return dim


def _refine_slice(s: SymbolicShapeInference, node: NodeProto) -> None:
    dims = s._shape(node.input[0])
    args = _slice_args(s, node, len(dims)) if dims is not None else None
    if dims is None or args is None:
        return
    out: list[int | Poly | None] = list(dims)
    for axis, start, end, step in args:
        d = dims[axis]
        if isinstance(d, int) or step != 1:
            continue  # onnx's inference computes these
        if start < 0 or end < 0 or (end < s.int_max_ and start > 0):
            lo = add(d, start) if start < 0 else start
            hi = d if end >= s.int_max_ else add(d, end) if end < 0 else end
            out[axis] = add(hi, lo, -1)
        elif end >= s.int_max_:
            out[axis] = add(d, start, -1)
        else:
            out[axis] = end - start if start >= 0 and end >= 0 else None
    s._set_shape(node.output[0], out)


def _refine_broadcast(s: SymbolicShapeInference, node: NodeProto) -> None:
    """Numpy broadcasting over symbols; two different symbols on one axis are merged
    (auto_merge) or leave the output unresolved."""
    shapes = _shapes(s, node)
    if not shapes:
        return
    n = max(len(d) for d in shapes)
    padded = [[*[1] * (n - len(d)), *d] for d in shapes]
    out = [_merged(s, node, list(axis)) for axis in zip(*padded, strict=True)]
    for o in node.output:
        if o in s._types:
            s._set_shape(o, out)


_REFINE: dict[str, _Infer] = {
    "Reshape": _refine_reshape,
    "Expand": _refine_from_value(1),
    "ConstantOfShape": _refine_from_value(0),
    "Tile": _refine_from_value(1),
    "Concat": _refine_concat,
    "Slice": _refine_slice,
    **dict.fromkeys(
        ("Add", "Sub", "Mul", "Div", "Pow", "Where", "Equal", "Less", "Greater", "And", "Or"),
        _refine_broadcast,
    ),
}


# -- the command line ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m turnout.tools.symbolic_shape_infer",
        description="Infer every value's shape, with symbolic dims, into the model's value_info.",
    )
    p.add_argument("--input", required=True, help="The input model file")
    p.add_argument("--output", help="The output model file")
    p.add_argument("--auto_merge", action="store_true", help="Merge conflicting symbolic dims")
    p.add_argument(
        "--int_max",
        type=int,
        default=2**31 - 1,
        help="The integer read as boundless in ops like Slice",
    )
    p.add_argument(
        "--guess_output_rank",
        action="store_true",
        help="Give unknown ops' outputs the rank of input 0",
    )
    p.add_argument(
        "--verbose", type=int, default=0, help="0: quiet, 1: warnings, 3: each node's shapes"
    )
    p.add_argument("--save_as_external_data", action="store_true")
    p.add_argument("--all_tensors_to_one_file", action="store_true")
    p.add_argument("--external_data_location", default="./")
    p.add_argument("--external_data_size_threshold", type=int, default=1024)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level={0: logging.ERROR, 1: logging.WARNING}.get(args.verbose, logging.INFO)
    )
    out = SymbolicShapeInference.infer_shapes(
        onnx.load(args.input), args.int_max, args.auto_merge, args.guess_output_rank, args.verbose
    )
    if args.output and out is not None:
        if args.save_as_external_data:
            onnx.save_model(
                out,
                args.output,
                save_as_external_data=True,
                all_tensors_to_one_file=args.all_tensors_to_one_file,
                location=args.external_data_location,
                size_threshold=args.external_data_size_threshold,
                convert_attribute=False,
            )
        else:
            onnx.save(out, args.output)
    return 0 if out is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
