"""Shape and type inference for the optimizer: onnx's inference with data propagation, over a
light copy of the graph (big initializers become typed inputs, so nothing large is serialized).

Outputs of turnout's own fused ops (domain ai.turnout, unknown to onnx) keep the type they had
before the fusion, so inference continues through them; symbolic dims (batch, sequence) flow
through as onnx names them. The types of the previous refresh size the values for the bound on
data propagation (`turnout.graph.shape_inference.infer_value_types`), so a refresh is one onnx pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
from onnx import helper

from turnout.graph.shape_inference import infer_value_types

if TYPE_CHECKING:
    from turnout.optimizer.graph import OptGraph

__all__ = ["infer_types", "light_model"]

_SMALL = 4096  # initializers up to this many elements stay values (shape tensors, scalars)


def infer_types(g: OptGraph) -> dict[str, onnx.TypeProto]:
    """The types onnx infers for the values of `g` as it is now, by name."""
    prior = g.known_types()
    tmp = light_model(g, stub_nested=True)
    graph = tmp.graph
    try:
        return infer_value_types(tmp, g.shape_data_max_elements, prior)
    except Exception:
        return {
            vi.name: vi.type
            for vi in (*graph.input, *graph.value_info, *graph.output)
            if vi.type.WhichOneof("value") is not None
        }


def light_model(g: OptGraph, stub_nested: bool = False) -> onnx.ModelProto:
    """`g` as it is now, as a model whose big initializers are typed inputs (no bytes), with
    the types known for outputs of ops onnx does not know.

    `stub_nested`: a node with nested graphs whose outputs have known types is left out, its
    outputs typed inputs (inferring through bodies again costs a copy of them per refresh;
    `fold_subgraphs` forgets the types of a node whose body it changed)."""
    m = g.model
    prior = g.known_types()
    graph = onnx.GraphProto(name=m.graph.name)
    graph.input.extend(m.graph.input)
    if stub_nested and g.nested:
        for n in g.nodes:
            outs = [o for o in n.output if o]
            if g.has_subgraph(n) and all(o in prior for o in outs):
                for o in outs:
                    graph.input.add(name=o).type.CopyFrom(prior[o])
            else:
                graph.node.append(n)
    else:
        graph.node.extend(g.nodes)
    present = {i.name for i in graph.input}
    for _, proto, vi in g.light_initializers(_SMALL):
        if proto is not None:
            graph.initializer.append(proto)
        elif vi is not None and vi.name not in present:
            graph.input.append(vi)
    # carry what we know about values onnx cannot infer (custom-domain outputs)
    custom = {o for n in g.nodes if n.domain not in ("", "ai.onnx") for o in n.output}
    for name in custom:
        tp = prior.get(name)
        if tp is not None:
            vi = graph.value_info.add(name=name)
            vi.type.CopyFrom(tp)
    for vi in m.graph.value_info:
        if vi.name in custom and vi.name not in prior:
            graph.value_info.append(vi)
    graph.output.extend(m.graph.output)
    return helper.make_model(graph, opset_imports=list(m.opset_import), ir_version=m.ir_version)
