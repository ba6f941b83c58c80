"""CastLike in a saved optimized model: the Cast onnxruntime writes for it (onnxruntime inlines
CastLike's function body at load), and the same outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout


def _model(opset: int, saturate: int | None) -> onnx.ModelProto:
    kw = {} if saturate is None else {"saturate": saturate}
    nodes = [
        helper.make_node("CastLike", ["x", "t"], ["c"], name="cl", **kw),
        helper.make_node("Relu", ["c"], ["y"], name="r"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("t", TensorProto.FLOAT16, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _saved(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    so = turnout.SessionOptions()
    so.graph_optimization_level = turnout.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(path)
    sess = turnout.InferenceSession(model.SerializeToString(), so, providers=["cpu"])
    x = np.array([-1.5, 0.25, 2.0, 300.0], np.float32)
    (y,) = sess.run(None, {"x": x, "t": np.zeros(1, np.float16)})
    np.testing.assert_array_equal(y, np.maximum(x, 0).astype(np.float16))
    return onnx.load(str(path))


@pytest.mark.parametrize(("opset", "saturate"), [(15, None), (19, None), (19, 0)])
def test_castlike_is_saved_as_the_cast_it_stands_for(
    tmp_path: Path, opset: int, saturate: int | None
) -> None:
    saved = _saved(_model(opset, saturate), tmp_path / "opt.onnx")
    (cast,) = [n for n in saved.graph.node if n.op_type == "Cast"]
    assert not [n for n in saved.graph.node if n.op_type == "CastLike"]
    assert list(cast.input) == ["x"]
    attrs = {a.name: helper.get_attribute_value(a) for a in cast.attribute}
    assert attrs["to"] == TensorProto.FLOAT16
    assert attrs.get("saturate", 1) == (1 if saturate is None else saturate)


def test_onnxruntime_saves_castlike_as_cast_too(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is in the test extra")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    ort.InferenceSession(
        _model(19, None).SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    ops = [n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node]
    assert "Cast" in ops and "CastLike" not in ops
