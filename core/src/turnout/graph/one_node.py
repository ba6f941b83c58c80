"""A model of one node, its inputs typed from given values: what `onnx.backend`'s `run_node`
runs (turnout.api.backend) and what kernel tests build (turnout.testing re-exports these)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from turnout.graph import contrib
from turnout.graph.dtypes import elem_type_of

__all__ = ["one_node_model", "positional_inputs"]


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    if value is None:
        return helper.make_empty_tensor_value_info(name)
    if isinstance(value, list):
        inner = elem_type_of(value[0].dtype) if value else onnx.TensorProto.FLOAT
        return helper.make_tensor_sequence_value_info(name, inner, None)
    arr = np.asarray(value)
    return helper.make_tensor_value_info(name, elem_type_of(arr.dtype), arr.shape)


def one_node_model(
    node: onnx.NodeProto,
    inputs: Sequence[Any],
    opsets: Mapping[str, int] | int = 21,
) -> onnx.ModelProto:
    """A model of the single `node`, inputs typed from the given arrays, outputs inferred."""
    if isinstance(opsets, int):
        opsets = {"": opsets}
    opsets = dict(opsets)
    if node.domain not in opsets and node.domain not in ("", "ai.onnx"):
        opsets[node.domain] = 1
    g = helper.make_graph(
        [node],
        "one_node",
        [_value_info(n, v) for n, v in zip(node.input, positional_inputs(node, inputs)) if n],
        [helper.make_empty_tensor_value_info(o) for o in node.output if o],
    )
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()]
    )
    model.ir_version = 10
    contrib.register_for_op(node.domain, node.op_type, opsets.get("", 1))
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        del model.graph.output[:]
        known = {vi.name: vi for vi in inferred.graph.value_info}
        known.update({vi.name: vi for vi in inferred.graph.output})
        for o in node.output:
            if o:
                vi = known.get(o)
                model.graph.output.append(
                    vi
                    if vi is not None and vi.type.WhichOneof("value")
                    else helper.make_empty_tensor_value_info(o)
                )
    except Exception:  # inference is a convenience here; kernels must cope with unknown types
        pass
    return model


def positional_inputs(node: onnx.NodeProto, values: Sequence[Any]) -> list[Any]:
    """One value per node input: given values fill the named inputs, `None` the empty names.

    Official data sets list values only for the graph inputs, i.e. the non-empty names; a list
    with one value per node input (absent optionals already `None`) is returned as it is.
    """
    if len(values) == len(node.input):
        return list(values)
    it = iter(values)
    return [next(it, None) if name else None for name in node.input]
