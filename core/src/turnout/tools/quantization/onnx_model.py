"""onnxruntime.quantization's `ONNXModel`: a ModelProto with the look-ups and edits that
quantization scripts use (nodes, initializers, readers and writers of a value, saving)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import onnx
from onnx import numpy_helper

__all__ = ["ONNXModel"]


class ONNXModel:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model

    def nodes(self) -> list[onnx.NodeProto]:
        return list(self.model.graph.node)

    def initializer(self) -> list[onnx.TensorProto]:
        return list(self.model.graph.initializer)

    def graph(self) -> onnx.GraphProto:
        return self.model.graph

    def ir_version(self) -> int:
        return self.model.ir_version

    def opset_import(self) -> list[onnx.OperatorSetIdProto]:
        return list(self.model.opset_import)

    def set_opset_import(self, domain: str, version: int) -> None:
        for opset in self.model.opset_import:
            if opset.domain == domain:
                opset.version = version
                return
        self.model.opset_import.extend([onnx.helper.make_opsetid(domain, version)])

    def get_initializer(self, name: str) -> onnx.TensorProto | None:
        return next((t for t in self.model.graph.initializer if t.name == name), None)

    def get_initializer_name_set(self) -> set[str]:
        return {t.name for t in self.model.graph.initializer}

    def find_node_by_name(
        self, node_name: str, new_nodes_list: Iterable[onnx.NodeProto], graph: onnx.GraphProto
    ) -> onnx.NodeProto | None:
        return next((n for n in [*new_nodes_list, *graph.node] if n.name == node_name), None)

    def input_name_to_nodes(self) -> dict[str, list[onnx.NodeProto]]:
        readers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.model.graph.node:
            for name in node.input:
                if name:
                    readers.setdefault(name, []).append(node)
        return readers

    def output_name_to_node(self) -> dict[str, onnx.NodeProto]:
        return {out: n for n in self.model.graph.node for out in n.output if out}

    def get_children(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        readers = self.input_name_to_nodes()
        return [child for out in node.output for child in readers.get(out, [])]

    def get_parents(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        writers = self.output_name_to_node()
        return [writers[i] for i in node.input if i in writers]

    def get_non_initializer_inputs(self) -> set[str]:
        initializers = self.get_initializer_name_set()
        return {i.name for i in self.model.graph.input if i.name not in initializers}

    def add_node(self, node: onnx.NodeProto) -> None:
        self.model.graph.node.extend([node])

    def add_nodes(self, nodes: Iterable[onnx.NodeProto]) -> None:
        self.model.graph.node.extend(nodes)

    def remove_node(self, node: onnx.NodeProto) -> None:
        if node in self.model.graph.node:
            self.model.graph.node.remove(node)

    def remove_nodes(self, nodes: Iterable[onnx.NodeProto]) -> None:
        for node in nodes:
            self.remove_node(node)

    def add_initializer(self, tensor: onnx.TensorProto) -> None:
        if self.get_initializer(tensor.name) is None:
            self.model.graph.initializer.extend([tensor])

    def remove_initializer(self, tensor: onnx.TensorProto) -> None:
        if tensor in self.model.graph.initializer:
            self.model.graph.initializer.remove(tensor)

    def get_constant_value(self, name: str) -> object:
        tensor = self.get_initializer(name)
        return None if tensor is None else numpy_helper.to_array(tensor)

    def replace_input_of_all_nodes(self, old: str, new: str) -> None:
        for node in self.model.graph.node:
            for i, name in enumerate(node.input):
                if name == old:
                    node.input[i] = new

    def replace_output_of_all_nodes(self, old: str, new: str) -> None:
        for node in self.model.graph.node:
            for i, name in enumerate(node.output):
                if name == old:
                    node.output[i] = new

    def remove_unused_constant(self) -> None:
        read = {i for n in self.model.graph.node for i in n.input}
        read |= {o.name for o in self.model.graph.output}
        for tensor in [t for t in self.model.graph.initializer if t.name not in read]:
            self.model.graph.initializer.remove(tensor)

    def topological_sort(self) -> None:
        """Order the nodes so that each comes after the writers of its inputs."""
        graph = self.model.graph
        known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
        pending, ordered = list(graph.node), []
        while pending:
            ready = [n for n in pending if all(i in known for i in n.input)] or pending[:1]
            for node in ready:
                ordered.append(node)
                known.update(node.output)
                pending.remove(node)
        del graph.node[:]
        graph.node.extend(ordered)

    def save_model_to_file(
        self, output_path: str | Path, use_external_data_format: bool = False
    ) -> None:
        from turnout.tools.quantization.graph import save_model

        save_model(self.model, output_path, use_external_data_format)
