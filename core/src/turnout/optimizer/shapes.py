"""Shape and type inference for the optimizer: onnx's inference with data propagation, over a
light copy of the graph (big initializers become typed inputs, so nothing large is serialized).

Outputs of turnout's own fused ops (domain ai.turnout, unknown to onnx) keep the type they had
before the fusion, so inference continues through them; symbolic dims (batch, sequence) flow
through as onnx names them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
from onnx import helper, numpy_helper

from ..shape_inference import infer_with_bounded_data_prop

if TYPE_CHECKING:
    from .graph import OptGraph

__all__ = ["infer_types"]

_SMALL = 4096  # initializers up to this many elements stay values (shape tensors, scalars)


def infer_types(g: OptGraph) -> dict[str, onnx.TypeProto]:
    m = g.model
    graph = helper.make_graph(list(g.nodes), m.graph.name, list(m.graph.input), [])
    present = {i.name for i in graph.input}
    for name in g.initializer_names():
        proto = g._init_protos.get(name)
        size = g.numel(name)
        # a big original initializer is not decoded: its proto has the type and dims
        v = g.const(name) if name in g.inits or (size is not None and size <= _SMALL) else None
        if v is not None and v.size <= _SMALL:
            graph.initializer.append(numpy_helper.from_array(v, name))
        elif name not in present:
            if proto is not None:
                dims, et = list(proto.dims), proto.data_type
            elif v is not None:
                from ..dtypes import elem_type_of

                dims, et = list(v.shape), elem_type_of(v.dtype)
            else:
                continue
            graph.input.append(helper.make_tensor_value_info(name, et, dims))
    # carry what we know about values onnx cannot infer (custom-domain outputs)
    custom = {o for n in g.nodes if n.domain not in ("", "ai.onnx") for o in n.output}
    for name in custom:
        tp = g.types.get(name)
        if tp is not None:
            vi = onnx.ValueInfoProto(name=name)
            vi.type.CopyFrom(tp)
            graph.value_info.append(vi)
    for vi in m.graph.value_info:
        if vi.name in custom and vi.name not in g.types:
            graph.value_info.append(vi)
    graph.output.extend(m.graph.output)
    tmp = helper.make_model(graph, opset_imports=list(m.opset_import), ir_version=m.ir_version)
    try:
        inferred = infer_with_bounded_data_prop(tmp, g.shape_data_max_elements)
    except Exception:
        inferred = tmp
    out: dict[str, onnx.TypeProto] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if vi.type.WhichOneof("value") is not None:
            out[vi.name] = vi.type
    return out
