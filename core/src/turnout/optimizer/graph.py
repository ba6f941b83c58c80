"""The optimizer's working graph: a mutable view over one ModelProto's top-level graph.

Passes edit `nodes` (NodeProtos in topological order) and `inits` (numpy arrays) through the
helpers here, which keep producer/consumer maps and the names the outside world sees: graph
inputs and outputs, and names read by nested graphs (If/Loop/Scan bodies), are never renamed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import onnx
from onnx import NodeProto, helper, numpy_helper

from turnout.graph.dtypes import elem_type_of
from turnout.graph.shape_inference import SHAPE_DATA_MAX_ELEMENTS
from turnout.graph.shared_arrays import SharedArrays
from turnout.graph.tensors import decode_tensor, from_array

__all__ = ["OptGraph", "attr", "Dim"]

Dim = int | str | None

# ops whose result is not a function of their inputs: never folded or merged
NONDETERMINISTIC = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)


def attr(node: NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


def _has_subgraph(node: NodeProto) -> bool:
    return any(a.type in (_GRAPH, _GRAPHS) for a in node.attribute)


def _subgraph_reads(node: NodeProto) -> Iterator[str]:
    for a in node.attribute:
        graphs = [a.g] if a.type == _GRAPH else list(a.graphs) if a.type == _GRAPHS else []
        for g in graphs:
            for n in g.node:
                yield from (x for x in n.input if x)
                yield from _subgraph_reads(n)
            yield from (o.name for o in g.output)


def _nested_names(node: NodeProto) -> Iterator[str]:
    """Every name a nested graph of `node` defines or reads (at any depth)."""
    for a in node.attribute:
        graphs = [a.g] if a.type == _GRAPH else list(a.graphs) if a.type == _GRAPHS else []
        for g in graphs:
            yield from (v.name for v in (*g.input, *g.output))
            yield from (t.name for t in g.initializer)
            for n in g.node:
                yield from n.input
                yield from n.output
                yield from _nested_names(n)


_LightEntry = tuple[object, onnx.TensorProto | None, onnx.ValueInfoProto | None]
"""(value, small proto, typed input) of an initializer: see `OptGraph.light_initializers`."""

_PLAIN_KINDS = frozenset("biufc")  # numpy kinds from_array stores as plain raw_data


def _values_only(v: np.ndarray | None, above: int | None) -> bool:
    """Whether initializer value `v` goes to `values` only, its proto holding no data."""
    return above is not None and v is not None and v.size > above and _decoded_form(v)


def _data_less(t: onnx.TensorProto, name: str, elem_type: int, dims: Iterable[int]) -> None:
    """Fill `t` as an initializer's name, type and dims, without its data."""
    t.name = name
    t.data_type = elem_type
    t.dims.extend(dims)


def _decoded_form(v: np.ndarray) -> bool:
    """Whether `v` is what numpy_helper.to_array returns for its own proto: a plain numeric,
    native-order, C-contiguous array."""
    return (
        type(v) is np.ndarray
        and v.dtype.kind in _PLAIN_KINDS
        and v.dtype.isnative
        and v.dtype.type.__module__ == "numpy"
        and v.flags.c_contiguous
    )


class OptGraph:
    """One model's top-level graph, editable by passes. Call `commit()` to write it back."""

    def __init__(
        self,
        model: onnx.ModelProto,
        keep_inits: Iterable[str] = (),
        initializers: Iterable[onnx.TensorProto] | None = None,
        shape_data_max_elements: int = SHAPE_DATA_MAX_ELEMENTS,
        decoded: dict[str, np.ndarray] | None = None,
        shared: SharedArrays | None = None,
    ) -> None:
        """`initializers` (read, never changed) stand for the model's own when given: the
        optimizer works on a copy without them, and `commit()` writes them in.
        `shape_data_max_elements` bounds onnx's data propagation
        (`turnout.graph.shape_inference`). `decoded` caches the original initializers'
        arrays by name, shared with other optimizations of the same initializers. `shared`
        holds another optimization's arrays: a new initializer equal to one of them is kept
        as that one (`add_init`)."""
        self.model = model
        self.shape_data_max_elements = shape_data_max_elements
        g = model.graph
        self.opsets = {
            ("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import
        }
        self._dropped: dict[int, NodeProto] = {}  # removed, not yet filtered out: see `nodes`
        self._nodes: list[NodeProto] = list(g.node)
        self.inits: dict[str, np.ndarray] = {}  # new or changed initializers
        # decoded original initializers
        self._cache: dict[str, np.ndarray] = decoded if decoded is not None else {}
        self._shared_cache = decoded is not None
        self._shared = shared
        self._protos: dict[str, tuple[np.ndarray, onnx.TensorProto]] = {}  # see small_init_proto
        self._light: dict[str, _LightEntry] = {}  # see light_initializers
        inits = g.initializer if initializers is None else initializers
        self._init_protos = {t.name: t for t in inits}
        self.input_names = [i.name for i in g.input]
        self.output_names = [o.name for o in g.output]
        # initializers that are also graph inputs can be overridden at run time: not constants
        # (from IR 4 on; before it every initializer had to be listed as an input, and
        # onnxruntime treats them as constants too)
        overridable = set(self.input_names) if model.ir_version >= 4 else set()
        self.non_constant = overridable | set(keep_inits)
        self.protected: set[str] = set(self.output_names)
        # inferred types, refreshed when first read after a pass changed the graph
        self._types: dict[str, onnx.TypeProto] = {}
        self._stale = True
        self._counter = itertools.count()
        # decoded initializer values of the committed model, by name (see commit())
        self.values: dict[str, np.ndarray] = {}
        # id(node) -> (node, whether it has nested graphs): the node is kept so its id stays
        # its own; passes never add a graph attribute to an existing node
        self._nested: dict[int, tuple[NodeProto, bool]] = {}
        self._reads: dict[int, tuple[NodeProto, tuple[str, ...]]] = {}  # see nested_reads
        self._used_names: set[str] = set(self._init_protos) | set(self.input_names)
        for n in self.nodes:
            self._used_names.update(n.output)
            self._used_names.update(n.input)
        # whether any node has nested graphs: most models have none, and then the walks that
        # look for names read by nested graphs are skipped (see `added_nested`)
        self.nested = False
        # (node id, attribute, outer constants) of bodies `fold_subgraphs` has optimized
        self.settled: set[tuple[object, ...]] = set()
        self.inlined = 0  # Ifs `inline_constant_if` inlined into this graph
        for n in self.nodes:
            if self.has_subgraph(n):
                self.nested = True
                self._used_names.update(_nested_names(n))

    # ------------------------------------------------------------------ constants
    def const(self, name: str) -> np.ndarray | None:
        """The value of `name` if it is a constant initializer (not an overridable input)."""
        if not name or name in self.non_constant:
            return None
        if name in self.inits:
            return self.inits[name]
        if name in self._cache:
            return self._cache[name]
        proto = self._init_protos.get(name)
        if proto is None or proto.data_type == onnx.TensorProto.UNDEFINED:
            return None
        arr = decode_tensor(proto, f"initializer of graph {self.model.graph.name!r}")
        self._cache[name] = arr
        return arr

    def forget(self, name: str) -> None:
        """Drop the decoded copy of original initializer `name` (decoded again if asked for):
        a pass that replaced it frees the memory for the arrays it makes next. A cache the
        caller shared keeps it: another optimization reads it, and the model's proto may hold
        no bytes for it (`turnout.graph.model.without_decoded_data`)."""
        if not self._shared_cache:
            self._cache.pop(name, None)

    def numel(self, name: str) -> int | None:
        """The element count of initializer `name`, without decoding it; None if not one."""
        if name in self.inits:
            return int(self.inits[name].size)
        proto = self._init_protos.get(name)
        return math.prod(proto.dims) if proto is not None else None

    def small_init_proto(self, name: str, limit: int) -> onnx.TensorProto | None:
        """Initializer `name` as a TensorProto when it has at most `limit` elements (the
        original proto, or one made once per new array), else None."""
        if name not in self.inits:
            proto = self._init_protos.get(name)
            if proto is None or proto.data_type == onnx.TensorProto.UNDEFINED:
                return None
            if math.prod(proto.dims) > limit:
                return None
            return proto
        v = self.inits[name]
        if v.size > limit:
            return None
        hit = self._protos.get(name)
        if hit is None or hit[0] is not v:
            hit = (v, from_array(v, name))
            self._protos[name] = hit
        return hit[1]

    def light_initializers(self, limit: int) -> Iterator[_LightEntry]:
        """For each initializer, in `initializer_names` order: (its value, its TensorProto
        when it has at most `limit` elements (`small_init_proto`), else its name, type and
        dims as a ValueInfoProto (None when unknown)). Made once per initializer value and
        reused while the same array or proto stands for it: the optimizer's shape
        inference lists every initializer at every refresh (848 of them in densenet121)."""
        for name in self.initializer_names():
            value: object = self.inits.get(name)
            if value is None:
                value = self._init_protos[name]
            hit = self._light.get(name)
            if hit is None or hit[0] is not value:
                proto = self.small_init_proto(name, limit)
                vi = None
                if proto is None:
                    found = self.init_type(name)
                    vi = None if found is None else helper.make_tensor_value_info(name, *found)
                hit = (value, proto, vi)
                self._light[name] = hit
            yield hit

    def init_type(self, name: str) -> tuple[int, list[int]] | None:
        """(elem type, dims) of initializer `name`, without decoding it; None if not one."""
        if name in self.inits:
            from turnout.graph.dtypes import elem_type_of

            v = self.inits[name]
            return elem_type_of(v.dtype), list(v.shape)
        proto = self._init_protos.get(name)
        return (proto.data_type, list(proto.dims)) if proto is not None else None

    def is_initializer(self, name: str) -> bool:
        return name in self.inits or name in self._init_protos

    def add_init(self, value: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        value = np.asarray(value)
        self.inits[name] = value if self._shared is None else self._shared.find(value)
        return name

    def initializer_names(self) -> list[str]:
        return list(dict.fromkeys([*self._init_protos, *self.inits]))

    def drop_init(self, name: str) -> None:
        self.inits.pop(name, None)
        self.forget(name)
        self._init_protos.pop(name, None)

    def scalar(self, name: str) -> float | None:
        """A constant holding exactly one number, as a float."""
        v = self.const(name)
        if v is None or v.size != 1 or v.dtype.kind not in "fiu":
            return None
        return float(v.reshape(()))

    # ------------------------------------------------------------------ names and maps
    def fresh(self, hint: str) -> str:
        while True:
            name = f"{hint}__opt{next(self._counter)}"
            if name not in self._used_names:
                self._used_names.add(name)
                return name

    def producers(self) -> dict[str, NodeProto]:
        return {o: n for n in self.nodes for o in n.output if o}

    def has_subgraph(self, n: NodeProto) -> bool:
        """Whether node `n` has nested graphs (If/Loop/Scan bodies), looked up once per node."""
        hit = self._nested.get(id(n))
        if hit is not None and hit[0] is n:
            return hit[1]
        found = _has_subgraph(n)
        self._nested[id(n)] = (n, found)
        return found

    def share_names(self, outer: OptGraph) -> None:
        """Draw fresh names from `outer`'s pool (this graph is a body nested in it), so that
        no name made here or there shadows or repeats another."""
        outer._used_names.update(self._used_names)
        self._used_names = outer._used_names
        self._counter = outer._counter

    def original_proto(self, name: str) -> onnx.TensorProto | None:
        """The model's own TensorProto of initializer `name`, unless a pass replaced it."""
        return None if name in self.inits else self._init_protos.get(name)

    def added_nested(self, n: NodeProto) -> None:
        """Record that node `n`, just added, may have nested graphs (an inlined If branch)."""
        if self.has_subgraph(n):
            self.nested = True
            self._used_names.update(_nested_names(n))

    def consumers(self) -> dict[str, list[NodeProto]]:
        """Readers of each value, in node order; a node is listed once per way it reads a
        value (as an input, and again when a nested graph of it reads the value too)."""
        out: dict[str, list[NodeProto]] = {}
        nested = self.nested
        for n in self.nodes:
            for x in n.input:
                if x:
                    readers = out.get(x)
                    if readers is None:
                        out[x] = [n]
                    elif readers[-1] is not n:  # an input read twice by n counts once
                        readers.append(n)
            if nested and self.has_subgraph(n):
                for x in self.nested_reads(n):
                    out.setdefault(x, []).append(n)
        return out

    def subgraph_reads(self) -> set[str]:
        """Names read by nested graphs (If/Loop/Scan bodies) of the nodes."""
        if not self.nested:
            return set()
        return {x for n in self.nodes if self.has_subgraph(n) for x in self.nested_reads(n)}

    def nested_reads(self, n: NodeProto) -> tuple[str, ...]:
        """The names the nested graphs of node `n` read (each once), walked once per node
        until `body_changed(n)`."""
        hit = self._reads.get(id(n))
        if hit is not None and hit[0] is n:
            return hit[1]
        found = tuple(dict.fromkeys(_subgraph_reads(n))) if self.has_subgraph(n) else ()
        self._reads[id(n)] = (n, found)
        return found

    def body_changed(self, n: NodeProto) -> None:
        """A pass edited a nested graph of `n`: what it reads, and `n`'s output types, may
        differ now."""
        self._reads.pop(id(n), None)
        for o in n.output:
            self.forget_type(o)

    # ------------------------------------------------------------------ shapes
    def refresh_shapes(self) -> None:
        """Re-run onnx shape inference (with data propagation) over the current graph."""
        from turnout.optimizer.shapes import infer_types

        self._types = infer_types(self)
        self._stale = False

    def mark_changed(self) -> None:
        """The graph changed: infer types again when they are next read (passes that never
        read them, such as dead-node removal, cost no inference)."""
        self._stale = True

    @property
    def types(self) -> dict[str, onnx.TypeProto]:
        """Inferred types by value name (refreshed first if the graph changed since)."""
        if self._stale:
            self.refresh_shapes()
        return self._types

    @types.setter
    def types(self, value: dict[str, onnx.TypeProto]) -> None:
        self._types = value
        self._stale = False

    def known_types(self) -> dict[str, onnx.TypeProto]:
        """The types of the last inference, without refreshing them: names keep their type
        across passes unless a pass calls `forget_type`."""
        return self._types

    def forget_type(self, name: str) -> None:
        """`name` now stands for another value than when types were last inferred."""
        self._types.pop(name, None)

    def shape(self, name: str) -> tuple[Dim, ...] | None:
        tp = self.types.get(name)
        if tp is None:
            v = self.const(name)
            return tuple(v.shape) if v is not None else None
        if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
            return None
        return tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tp.tensor_type.shape.dim
        )

    def elem_type(self, name: str) -> int | None:
        tp = self.types.get(name)
        if tp is None:
            v = self.const(name)
            if v is not None:
                from turnout.graph.dtypes import elem_type_of

                return elem_type_of(v.dtype)
            return None
        if tp.WhichOneof("value") != "tensor_type":
            return None
        return tp.tensor_type.elem_type or None

    # ------------------------------------------------------------------ edits
    def replace_value(self, old: str, new: str) -> bool:
        """Make every reader of `old` read `new` instead; False (nothing changed) if impossible.

        When `old` is a graph output (or read by a nested graph) its name must stay, so `new`'s
        producer is renamed to `old` instead, provided `new` is a plain node output.
        """
        if old == new:
            return True
        outside = self.protected | self.subgraph_reads()
        if old not in outside:
            self._rename_uses(old, new)
            return True
        prod = self.producers().get(new)
        if prod is None or new in outside or new in self.input_names:
            return False
        prod.output[list(prod.output).index(new)] = old
        self._rename_uses(new, old, skip=prod)
        self.forget_type(new)
        return True

    def _rename_uses(self, old: str, new: str, skip: NodeProto | None = None) -> None:
        for n in self.nodes:
            if n is skip or old not in n.input:
                continue
            for i, x in enumerate(n.input):
                if x == old:
                    n.input[i] = new

    @property
    def nodes(self) -> list[NodeProto]:
        """The nodes in topological order, without those removed since last read (a pass that
        removes nodes one at a time then filters the list once, not once per node)."""
        if self._dropped:
            dropped = self._dropped
            self._nodes = [n for n in self._nodes if id(n) not in dropped]
            self._dropped = {}
        return self._nodes

    @nodes.setter
    def nodes(self, value: list[NodeProto]) -> None:
        self._nodes = value
        self._dropped = {}

    def remove(self, *nodes: NodeProto) -> None:
        """Take `nodes` out of the graph (a list read from `nodes` before keeps them)."""
        for n in nodes:
            self._dropped[id(n)] = n  # held until filtered out, so that no id is reused

    def insert_before(self, anchor: NodeProto, node: NodeProto) -> None:
        """Insert `node` just before `anchor` (keeps topological order when inputs are ready),
        or last when `anchor` is not in the graph.

        Works on the list with the removed nodes still in it (a fusion that inserts and
        removes node after node filters it once, not once per insert), unless `node` is one
        of them (a pass moving it): then filtered first, so that it stays. Finds `anchor` by
        identity in one C-level scan."""
        nodes = self.nodes if id(node) in self._dropped else self._nodes
        if id(anchor) not in self._dropped:
            try:
                nodes.insert(list(map(id, nodes)).index(id(anchor)), node)
                return
            except ValueError:
                pass
        nodes.append(node)

    def make_node(self, op: str, inputs: list[str], outputs: list[str], **kw: Any) -> NodeProto:
        domain = kw.pop("domain", "")
        name = self.fresh(kw.pop("name", op))
        return helper.make_node(op, inputs, outputs, name=name, domain=domain, **kw)

    def ensure_opset(self, domain: str, version: int = 1) -> None:
        if domain not in self.opsets:
            self.opsets[domain] = version
            self.model.opset_import.append(helper.make_opsetid(domain, version))

    def toposort(self) -> None:
        """Restore topological order after edits that moved producers (stable otherwise)."""
        produced = {o for n in self.nodes for o in n.output if o}
        ready: set[str] = set()
        pending = list(self.nodes)
        ordered: list[NodeProto] = []
        while pending:
            rest = []
            for n in pending:
                reads = (
                    itertools.chain(n.input, self.nested_reads(n))
                    if self.nested and self.has_subgraph(n)
                    else n.input
                )
                needs = [x for x in reads if x in produced]
                if all(x in ready for x in needs):
                    ordered.append(n)
                    ready.update(n.output)
                else:
                    rest.append(n)
            if len(rest) == len(pending):  # a cycle cannot come from a pass; keep what is left
                ordered.extend(rest)
                break
            pending = rest
        self.nodes = ordered

    def commit(self, values_only_above: int | None = None) -> onnx.ModelProto:
        """Write nodes and initializers back into the model proto and return it.

        `values` then maps initializers whose decoded array the optimizer holds (new ones and
        originals it read) to that array, equal to `numpy_helper.to_array` of its proto.
        Those of more than `values_only_above` elements are written without their data.
        """
        g = self.model.graph
        del g.node[:]
        g.node.extend(self.nodes)
        del g.initializer[:]
        self.values = {}
        for name in self.initializer_names():
            if name not in self.inits:
                proto = self._init_protos[name]
                value = self._cache.get(name)
                if value is None and proto.data_type != onnx.TensorProto.UNDEFINED:
                    value = decode_tensor(proto, f"initializer of graph {g.name!r}")
                    self._cache[name] = value  # the IR takes it from `values`
                if _values_only(value, values_only_above):
                    _data_less(g.initializer.add(), name, proto.data_type, proto.dims)
                else:
                    g.initializer.append(proto)
            elif _values_only(value := self.inits[name], values_only_above):
                _data_less(g.initializer.add(), name, elem_type_of(value.dtype), value.shape)
            elif value.dtype.kind in _PLAIN_KINDS:
                # numpy_helper.from_array's fields, written in place (no intermediate proto)
                t = g.initializer.add(name=name, data_type=elem_type_of(value.dtype))
                t.dims.extend(value.shape)
                t.raw_data = numpy_helper.tobytes_little_endian(value)
            else:
                g.initializer.append(from_array(value, name))
            if value is not None and _decoded_form(value):
                self.values[name] = value
        alive = {x for n in self.nodes for x in n.output} | set(self.initializer_names())
        kept = [vi for vi in g.value_info if vi.name in alive]
        # onnx cannot infer the outputs of turnout's fused ops (and so nothing after them):
        # record the types the optimizer knows, so providers see dtypes and ranks there
        known = {vi.name for vi in kept}
        for n in self.nodes:
            if n.domain in ("", "ai.onnx"):
                continue
            for o in n.output:
                tp = self._types.get(o)
                if o and o not in known and tp is not None:
                    vi = onnx.ValueInfoProto(name=o)
                    vi.type.CopyFrom(tp)
                    kept.append(vi)
                    known.add(o)
        del g.value_info[:]
        g.value_info.extend(kept)
        return self.model

    def count(self, pred: Callable[[NodeProto], bool] | None = None) -> int:
        return sum(1 for n in self.nodes if pred is None or pred(n))
