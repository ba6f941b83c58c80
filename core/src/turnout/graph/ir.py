"""The graph IR: Graph, Node and ValueInfo, decoded once from protobuf, plus the read-only
`GraphView` that providers see and the `KernelNode` it builds. Nested graphs (If/Loop/Scan
bodies) are `Graph`s held in the owning node's attributes, with `parent` set so outer-scope
names resolve.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, NodeProto, TypeProto

from turnout.graph import contrib
from turnout.graph.dims import Dim, declared_shape
from turnout.graph.dtypes import np_dtype
from turnout.graph.errors import EPFail, InvalidGraph
from turnout.graph.sparse import SparseTensor
from turnout.graph.structure import NAME_IN_MODEL_KEY
from turnout.graph.tensors import decode_tensor

__all__ = [
    "Graph",
    "GraphView",
    "KernelNode",
    "Node",
    "ValueInfo",
    "declared_shape",
    "schema_since_version",
    "schema_type_params",
]


@dataclass(frozen=True)
class ValueInfo:
    """A value's name and type. `kind` is tensor/sequence/map/optional/sparse_tensor/unknown."""

    name: str
    kind: str = "unknown"
    elem_type: int | None = None
    shape: tuple[Dim, ...] | None = None
    type_proto: TypeProto | None = None

    @property
    def dtype(self) -> np.dtype[Any] | None:
        if self.elem_type is None:
            return None
        try:
            return np_dtype(self.elem_type)
        except KeyError:
            return None

    @staticmethod
    def from_proto(name: str, tp: TypeProto | None) -> ValueInfo:
        if tp is None:
            return ValueInfo(name)
        kind = tp.WhichOneof("value")
        if kind in ("tensor_type", "sparse_tensor_type"):
            tt = tp.tensor_type if kind == "tensor_type" else tp.sparse_tensor_type
            shape = declared_shape(tt)
            return ValueInfo(name, kind.removesuffix("_type"), tt.elem_type or None, shape, tp)
        if kind is None:
            return ValueInfo(name, "unknown", None, None, tp)
        return ValueInfo(name, kind.removesuffix("_type"), None, None, tp)


def decode_attribute(a: AttributeProto, graph: Graph | None) -> Any:
    """An attribute as a Python value; graphs become `Graph`s whose parent is `graph`."""
    t = a.type
    A = AttributeProto
    if t == A.INT:
        return int(a.i)
    if t == A.FLOAT:
        return float(a.f)
    if t == A.STRING:
        return _decode_str(a.s)
    if t == A.TENSOR:
        return decode_tensor(a.t, f"attribute {a.name!r}")
    if t == A.GRAPH:
        return Graph.from_proto(a.g, graph.opsets if graph else {}, parent=graph)
    if t == A.INTS:
        return [int(x) for x in a.ints]
    if t == A.FLOATS:
        return [float(x) for x in a.floats]
    if t == A.STRINGS:
        return [_decode_str(x) for x in a.strings]
    if t == A.TENSORS:
        return [decode_tensor(x, f"attribute {a.name!r}") for x in a.tensors]
    if t == A.GRAPHS:
        return [Graph.from_proto(g, graph.opsets if graph else {}, parent=graph) for g in a.graphs]
    if t == A.SPARSE_TENSOR:
        return a.sparse_tensor
    if t == A.TYPE_PROTO:
        return a.tp
    if t == A.TYPE_PROTOS:
        return list(a.type_protos)
    raise InvalidGraph(f"attribute {a.name!r} has unknown type {t}")


def attr_text(value: Any, default: str = "") -> str:
    """A string attribute's value as str, `default` when absent (None).

    `decode_attribute` leaves bytes only where a string is not UTF-8; those are decoded here
    (raising, as before), so kernels compare against str names alone, with this one helper.
    """
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _decode_str(b: bytes) -> str | bytes:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b


class Node:
    """One operator application. `attrs` holds decoded values; `proto` the original NodeProto.

    `name_in_model` is the model's name for a node that turnout renamed at load, adding a
    suffix to tell it from an earlier node of the same name (`structure.suffix_repeated_names`);
    None for every other node."""

    __slots__ = (
        "attrs",
        "domain",
        "graph",
        "implicit_inputs",
        "input_infos",
        "inputs",
        "name",
        "name_in_model",
        "op_type",
        "output_infos",
        "outputs",
        "proto",
    )

    def __init__(self, proto: NodeProto, graph: Graph, index: int) -> None:
        self.proto = proto
        self.graph = graph
        self.op_type = proto.op_type
        self.domain = "" if proto.domain == "ai.onnx" else proto.domain
        self.name = proto.name or f"{proto.op_type}_{index}"
        self.name_in_model: str | None = _name_in_model(proto)
        self.inputs: tuple[str, ...] = tuple(proto.input)
        self.outputs: tuple[str, ...] = tuple(proto.output)
        self.attrs: dict[str, Any] = {a.name: decode_attribute(a, graph) for a in proto.attribute}
        self.input_infos: tuple[ValueInfo | None, ...] = ()
        self.output_infos: tuple[ValueInfo | None, ...] = ()
        self.implicit_inputs: tuple[str, ...] = ()

    def subgraphs(self) -> list[Graph]:
        out: list[Graph] = []
        for v in self.attrs.values():
            if isinstance(v, Graph):
                out.append(v)
            elif isinstance(v, list) and v and isinstance(v[0], Graph):
                out.extend(v)
        return out

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.domain or 'ai.onnx'}::{self.op_type})"


def _name_in_model(proto: NodeProto) -> str | None:
    for p in proto.metadata_props:
        if p.key == NAME_IN_MODEL_KEY:
            return str(p.value)
    return None


class Graph:
    """A graph: nodes in topological order, inputs, outputs, initializers, known value types."""

    def __init__(self, name: str, opsets: Mapping[str, int], parent: Graph | None = None) -> None:
        self.name = name
        self.opsets = dict(opsets)
        self.parent = parent
        self.nodes: list[Node] = []
        self.inputs: list[ValueInfo] = []
        self.outputs: list[ValueInfo] = []
        self.initializers: dict[str, Any] = {}
        self.value_infos: dict[str, ValueInfo] = {}
        self.proto: GraphProto | None = None

    @staticmethod
    def from_proto(
        g: GraphProto,
        opsets: Mapping[str, int],
        parent: Graph | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> Graph:
        """The IR of `g`; `values` may hold initializers already decoded (`to_array`'s result)."""
        graph = Graph(g.name, opsets, parent)
        graph.proto = g
        for init in g.initializer:
            known = values.get(init.name) if values else None
            graph.initializers[init.name] = (
                known if known is not None else decode_tensor(init, f"graph {g.name!r}")
            )
        for sp in g.sparse_initializer:
            graph.initializers[sp.values.name] = SparseTensor.from_proto(sp)
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            graph.value_infos[vi.name] = ValueInfo.from_proto(vi.name, vi.type)
        fed = {i.name for i in g.input}
        for name, arr in graph.initializers.items():
            # an initializer no feed can replace is what its data says, whatever a value_info
            # declares (onnxruntime ignores such a declaration); an overridable one keeps its
            # input's declaration, which a feed must match
            info = graph.value_infos.get(name)
            if name not in fed or info is None or info.elem_type is None:
                graph.value_infos[name] = _info_of_constant(name, arr)
        for n in g.node:  # onnxruntime makes these initializers too
            info = _info_of_constant_node(n)
            if info is not None:
                graph.value_infos[info.name] = info
        graph.inputs = [graph.value_infos[i.name] for i in g.input]
        graph.outputs = [graph.value_infos[o.name] for o in g.output]
        graph.nodes = [Node(n, graph, i) for i, n in enumerate(g.node)]
        seen: set[str] = set()
        for n in graph.nodes:
            while n.name in seen:
                n.name += "_"
            seen.add(n.name)
            refs: list[str] = []
            for sg in n.subgraphs():
                refs.extend(x for x in sg.outer_references() if x not in refs)
            n.implicit_inputs = tuple(refs)
        graph.refresh_infos()
        return graph

    def refresh_infos(self) -> None:
        """Attach known ValueInfos to each node's inputs and outputs."""
        for n in self.nodes:
            n.input_infos = tuple(self.lookup_info(x) if x else None for x in n.inputs)
            n.output_infos = tuple(
                self.value_infos.get(x, ValueInfo(x)) if x else None for x in n.outputs
            )

    def lookup_info(self, name: str) -> ValueInfo:
        g: Graph | None = self
        while g is not None:
            if name in g.value_infos:
                return g.value_infos[name]
            g = g.parent
        return ValueInfo(name)

    def iter_all_nodes(self) -> Iterator[Node]:
        for n in self.nodes:
            yield n
            for sg in n.subgraphs():
                yield from sg.iter_all_nodes()

    def outer_references(self) -> list[str]:
        """Names this graph (and its subgraphs) read that it does not define itself."""
        defined = {i.name for i in self.inputs} | set(self.initializers)
        for n in self.nodes:
            defined.update(x for x in n.outputs if x)
        used: list[str] = []
        seen: set[str] = set()
        for n in self.nodes:
            names = list(n.inputs)
            for sg in n.subgraphs():
                names.extend(sg.outer_references())
            for x in names:
                if x and x not in defined and x not in seen:
                    seen.add(x)
                    used.append(x)
        for o in self.outputs:
            if o.name not in defined and o.name not in seen:
                seen.add(o.name)
                used.append(o.name)
        return used


def _info_of_constant(name: str, arr: Any) -> ValueInfo:
    from turnout.graph.dtypes import elem_type_of

    if isinstance(arr, (np.ndarray, SparseTensor)):  # a sparse one is dense in the graph
        return _tensor_info(name, elem_type_of(arr.dtype), arr.shape)
    return ValueInfo(name, "sparse_tensor")


def _info_of_constant_node(node: NodeProto) -> ValueInfo | None:
    """A Constant's output as its tensor says, whatever a declaration says (None: not a
    Constant, or one without a tensor attribute)."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or not node.output:
        return None
    for a in node.attribute:
        if a.name == "value" and a.type == AttributeProto.TENSOR:
            return _tensor_info(node.output[0], a.t.data_type, a.t.dims)
        if a.name == "sparse_value":
            sp = a.sparse_tensor
            return _tensor_info(node.output[0], sp.values.data_type, sp.dims)
    return None


def _tensor_info(name: str, elem_type: int, shape: Iterable[int]) -> ValueInfo:
    dims = tuple(int(d) for d in shape)
    tp = onnx.helper.make_tensor_type_proto(elem_type, dims)
    return ValueInfo(name, "tensor", elem_type or None, dims, tp)


@functools.lru_cache(maxsize=4096)
def _schema(domain: str, op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    contrib.register_for_op(domain, op_type, opset)
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


def schema_since_version(domain: str, op_type: str, opset: int) -> int | None:
    """The since-version of the op's schema in force at `opset`, or None for unknown ops."""
    s = _schema(domain, op_type, opset)
    return s.since_version if s is not None else None


_NO_DEFAULTS: Mapping[str, Any] = MappingProxyType({})


@functools.lru_cache(maxsize=4096)
def schema_defaults(domain: str, op_type: str, opset: int) -> Mapping[str, Any]:
    """The attribute defaults onnx's schema declares for an ai.onnx op at `opset`, decoded: the
    values onnx.reference's `OpRun` fills in for absent attributes. Empty for other domains
    (their schemas are turnout's or a plugin's, not onnx's) and for unknown ops."""
    s = _schema(domain, op_type, opset) if domain in ("", "ai.onnx") else None
    if s is None:
        return _NO_DEFAULTS
    found = {
        name: decode_attribute(a.default_value, None)
        for name, a in s.attributes.items()
        if a.default_value.type != AttributeProto.UNDEFINED
    }
    return MappingProxyType(found)


@functools.lru_cache(maxsize=4096)
def schema_type_params(domain: str, op_type: str, opset: int) -> tuple[list[str], list[str]]:
    """Type-parameter names (like "T") of each formal input and output; variadics repeat."""
    s = _schema(domain, op_type, opset)
    if s is None:
        return [], []
    ins = [p.type_str for p in s.inputs]
    outs = [p.type_str for p in s.outputs]
    if s.inputs and s.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        ins += [ins[-1]] * 64
    if s.outputs and s.outputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        outs += [outs[-1]] * 64
    return ins, outs


_ABSENT = object()


class KernelNode:
    """What a kernel factory sees: one node with decoded attributes and known input/output types.

    `inputs`/`outputs` are `ir.ValueInfo` entries (name, elem_type, dtype, shape) or None for an
    absent optional input. `subgraph(attr)` returns a callable running a nested graph (If, Loop,
    Scan bodies) with the session's providers: `run(inputs: list, outer: dict) -> list`.
    `context` is the `turnout.sdk.provider.KernelContext` of the provider building the kernel
    (None outside a session). It lives here, with the IR, so that `GraphView.kernel_node` builds
    one without the graph layer importing the provider contract, which re-exports it.
    """

    __slots__ = ("_subgraph_builder", "context", "node", "opset", "since_version")

    def __init__(
        self,
        node: Node,
        opset: int,
        since_version: int,
        subgraph_builder: Callable[[Graph], Callable[..., list[Any]]] | None = None,
        context: Any = None,
    ) -> None:
        self.node = node
        self.opset = opset
        self.since_version = since_version
        self._subgraph_builder = subgraph_builder
        self.context = context

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def domain(self) -> str:
        return self.node.domain

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def attrs(self) -> Mapping[str, Any]:
        return self.node.attrs

    @property
    def inputs(self) -> tuple[Any, ...]:
        return self.node.input_infos

    @property
    def outputs(self) -> tuple[Any, ...]:
        return self.node.output_infos

    def attr(self, name: str, default: Any = None) -> Any:
        """The decoded attribute value (int, float, str, list, ndarray, Graph); when the node
        lacks it, `default` if one is given, else onnx's schema default for an ai.onnx op (as
        onnx.reference's `OpRun` fills in, so kernels need not repeat it), else None."""
        value = self.node.attrs.get(name, _ABSENT)
        if value is not _ABSENT:
            return value
        if default is not None:
            return default
        value = schema_defaults(self.domain, self.op_type, self.since_version).get(name)
        return copy.copy(value) if isinstance(value, (list, np.ndarray)) else value

    @property
    def subgraph_builder(self) -> Callable[[Graph], Callable[..., list[Any]]] | None:
        """What `subgraph` builds nested graphs with (None outside a session). A provider that
        wraps a KernelNode in its own (a view with other input types, say) passes it on."""
        return self._subgraph_builder

    def subgraph(self, attr_name: str) -> Callable[..., list[Any]]:
        """A runnable for the nested graph in attribute `attr_name`, built by the session."""
        if self._subgraph_builder is None:
            raise EPFail(f"node {self.node.name!r}: no subgraph support in this context")
        return self._subgraph_builder(self.node.attrs[attr_name])


class GraphView:
    """Read-only view of one (sub)graph for providers during partitioning.

    It lists nodes (all, or those no provider has claimed yet), resolves types, and builds the
    `KernelNode` a registry matches against. Providers never see protobuf through it.
    """

    def __init__(self, graph: Graph, assigned: Mapping[str, str]) -> None:
        self._graph = graph
        self._assigned = assigned

    @property
    def name(self) -> str:
        return self._graph.name

    @property
    def opsets(self) -> Mapping[str, int]:
        return dict(self._graph.opsets)

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._graph.nodes)

    @property
    def inputs(self) -> tuple[ValueInfo, ...]:
        return tuple(self._graph.inputs)

    @property
    def outputs(self) -> tuple[ValueInfo, ...]:
        return tuple(self._graph.outputs)

    def is_initializer(self, name: str) -> bool:
        return name in self._graph.initializers

    def initializer(self, name: str) -> Any:
        return self._graph.initializers[name]

    def value_info(self, name: str) -> ValueInfo:
        return self._graph.lookup_info(name)

    def unassigned_nodes(self) -> list[Node]:
        return [n for n in self._graph.nodes if n.name not in self._assigned]

    def consumers(self, value: str) -> list[Node]:
        """Nodes reading `value`, including through their subgraphs (If/Loop/Scan bodies)."""
        return [n for n in self._graph.nodes if value in n.inputs or value in n.implicit_inputs]

    def producer(self, value: str) -> Node | None:
        for n in self._graph.nodes:
            if value in n.outputs:
                return n
        return None

    def kernel_node(self, node: Node) -> KernelNode:
        opset = self._graph.opsets.get(node.domain, 0)
        since = schema_since_version(node.domain, node.op_type, opset) or opset
        return KernelNode(node, opset, since)
