"""How many onnx inference passes the bounded data propagation takes: one when every node that
could propagate data touches a value not known to be small (the second pass would infer what
the first did), two when a node is left to propagate (a Shape feeding a Reshape)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.graph.shape_inference import infer_with_bounded_data_prop


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 128])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _passes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The data_prop flag of each onnx inference pass made from now on."""
    seen: list[bool] = []
    real = onnx.shape_inference.infer_shapes

    def counted(model: onnx.ModelProto, *args: object, **kw: bool) -> onnx.ModelProto:
        seen.append(bool(kw.get("data_prop")))
        return real(model, *args, **kw)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counted)
    return seen


def _types(m: onnx.ModelProto) -> dict[str, bytes]:
    return {vi.name: vi.type.SerializeToString() for vi in (*m.graph.value_info, *m.graph.output)}


def test_one_pass_when_nothing_is_left_to_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    w = numpy_helper.from_array(np.ones((64, 128), np.float32), "w")
    m = _model(
        [
            helper.make_node("Add", ["x", "w"], ["a"]),  # data-propagating, on 8192 elements
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Mul", ["r", "x"], ["y"]),
        ],
        [w],
    )
    want = _types(onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True))
    seen = _passes(monkeypatch)
    got = infer_with_bounded_data_prop(m)
    assert seen == [False]
    assert _types(got) == want
    assert got.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 128


def test_two_passes_when_a_shape_is_left_to_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    m = _model(
        [
            helper.make_node("Add", ["x", "x"], ["a"]),  # cut: 8192 elements
            helper.make_node("Shape", ["a"], ["s"]),  # never cut: reads only a shape
            helper.make_node("Reshape", ["a", "s"], ["y"]),
        ],
        [],
    )
    seen = _passes(monkeypatch)
    got = infer_with_bounded_data_prop(m)
    assert seen == [False, True]
    dims = got.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [64, 128]  # learned through the Shape's data
