"""The model edits both quantizers share: loading and saving, fresh names, initializers, the
element types of values, and rewiring the consumers of a value."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from turnout.graph.errors import InvalidArgument, NoSuchFile

__all__ = ["GraphEditor", "ModelInput", "load_model", "save_model"]

ModelInput = str | os.PathLike[str] | onnx.ModelProto


def load_model(model: ModelInput) -> onnx.ModelProto:
    """A copy of `model` (a path or a ModelProto; a given ModelProto is never changed)."""
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    path = Path(model)
    if not path.is_file():
        raise NoSuchFile(f"model_input {str(path)!r} does not exist")
    return onnx.load(str(path))


def save_model(
    model: onnx.ModelProto, target: ModelInput | None, external_data: bool = False
) -> None:
    """Write `model` to the path `target` (its weights to `<name>.data` beside it when
    `external_data`, or when the model is too large for one protobuf), or into the ModelProto
    `target`."""
    if target is None:
        return
    if isinstance(target, onnx.ModelProto):
        target.CopyFrom(model)
        return
    path = Path(target)
    if external_data or model.ByteSize() > 2**31 - 1_000_000:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # onnx.save moves the weights out of the proto it is given
        onnx.save(copy, str(path), save_as_external_data=True, location=f"{path.name}.data")
    else:
        onnx.save(model, str(path))


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _reads(graph: onnx.GraphProto) -> set[str]:
    """Every value name a node of `graph` or of its subgraphs reads."""
    read = {v for n in graph.node for v in n.input}
    for node in graph.node:
        for sub in _subgraphs(node):
            read |= _reads(sub)
    return read


def _rename_in_subgraph(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Point references to the outer value `old` inside `graph` (and deeper) at `new`, unless
    the subgraph defines its own value of that name."""
    local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    local |= {o for n in graph.node for o in n.output}
    if old in local:
        return
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for sub in _subgraphs(node):
            _rename_in_subgraph(sub, old, new)


class GraphEditor:
    """The main graph of a model, with its initializers by name, the element type of every
    value that shape inference can type, and a source of names not yet used."""

    def __init__(
        self, model: onnx.ModelProto, float_types: Iterable[int] = (onnx.TensorProto.FLOAT,)
    ) -> None:
        self.model = model
        self.float_types = frozenset(float_types)  # the element types `is_float` accepts
        self.graph = model.graph
        fed = {i.name for i in self.graph.input}
        # an initializer that is also a graph input (IR < 4) may be overridden by a feed: it is
        # not a constant, and quantizing it would leave that input without its default
        self.initializers = {t.name: t for t in self.graph.initializer if t.name not in fed}
        inferred = shape_inference.infer_shapes(model)
        self.elem_types: dict[str, int] = {}
        for info in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
            if info.type.HasField("tensor_type"):
                self.elem_types[info.name] = info.type.tensor_type.elem_type
        for t in self.graph.initializer:
            self.elem_types[t.name] = t.data_type
        self._used = {v for n in self.graph.node for v in [*n.input, *n.output, n.name]}
        self._used |= set(self.initializers) | {i.name for i in self.graph.input}
        self.graph_inputs = {i.name for i in self.graph.input}
        self.graph_outputs = {o.name for o in self.graph.output}

    def fresh(self, hint: str) -> str:
        """`hint`, or `hint_2`, `hint_3`, ...: a name no value or node of the graph has."""
        name, n = hint, 1
        while name in self._used:
            n += 1
            name = f"{hint}_{n}"
        self._used.add(name)
        return name

    def is_float(self, name: str) -> bool:
        return self.elem_types.get(name) in self.float_types

    def scale_dtype(self, name: str) -> type:
        """The dtype of `name`'s quantization scale: float16 for a float16 value (onnxruntime
        writes a float16 model's scales in float16), else float32."""
        return np.float16 if self.elem_types.get(name) == onnx.TensorProto.FLOAT16 else np.float32

    def constant(self, name: str) -> np.ndarray | None:
        """The value of initializer `name`, or None when `name` is computed or fed."""
        tensor = self.initializers.get(name)
        return None if tensor is None else numpy_helper.to_array(tensor)

    def add_initializer(self, value: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        tensor = numpy_helper.from_array(np.asarray(value), name)
        self.graph.initializer.append(tensor)
        self.initializers[name] = tensor
        self.elem_types[name] = tensor.data_type
        return name

    def consumers(self, name: str) -> list[onnx.NodeProto]:
        return [n for n in self.graph.node if name in n.input]

    def producer(self, name: str) -> onnx.NodeProto | None:
        return next((n for n in self.graph.node if name in n.output), None)

    def rewire(self, old: str, new: str, skip: Iterable[onnx.NodeProto] = ()) -> None:
        """Make every reader of `old` (subgraphs included), except the nodes in `skip`, read
        `new` instead."""
        skipped = {id(n) for n in skip}
        for node in self.graph.node:
            if id(node) in skipped:
                continue
            for i, name in enumerate(node.input):
                if name == old:
                    node.input[i] = new
            for sub in _subgraphs(node):
                _rename_in_subgraph(sub, old, new)

    def drop_unused_initializers(self, names: Iterable[str]) -> None:
        """Remove the initializers among `names` that no node reads any more."""
        read = _reads(self.graph)
        for name in set(names) - read - self.graph_outputs:
            tensor = self.initializers.pop(name, None)
            if tensor is not None:
                self.graph.initializer.remove(tensor)

    def check_opset(self, minimum: int, why: str) -> int:
        """The model's ai.onnx opset, refused when below `minimum` (`why` says what needs it)."""
        opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if opset < minimum:
            raise InvalidArgument(
                f"the model imports ai.onnx opset {opset}; {why} needs opset {minimum} or later "
                f"(convert it with onnx.version_converter first)"
            )
        return opset
