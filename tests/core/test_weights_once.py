"""A session holds its weights once (issue 27): the optimized proto keeps no data for the
initializers the IR holds as arrays, a second placement of the same model shares those arrays,
and what is saved or compiled gets the weights back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.shape_inference import SHAPE_DATA_MAX_ELEMENTS

BIG = SHAPE_DATA_MAX_ELEMENTS + 1  # elements: above it a weight lives in the IR only


def _model() -> onnx.ModelProto:
    """x @ w + b, then Reshape to a shape held in a small initializer (data propagation)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((BIG, 2)).astype(np.float32)
    b = np.array([0.5, -0.5], np.float32)
    shape = np.array([2, 1], np.int64)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Reshape", ["a", "shape"], ["y"], name="reshape"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, BIG])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(b, "b"),
            numpy_helper.from_array(shape, "shape"),
        ],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


X = np.linspace(-1, 1, BIG, dtype=np.float32).reshape(1, BIG)


def _expected(model: onnx.ModelProto) -> np.ndarray:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return (X @ inits["w"] + inits["b"]).reshape(2, 1)


def _by_name(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def test_the_optimized_proto_holds_no_big_weights() -> None:
    model = _model()
    sess = turnout.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    inits = _by_name(sess._engine.model)
    assert inits["w"].raw_data == b"" and list(inits["w"].dims) == [BIG, 2]
    assert numpy_helper.to_array(inits["shape"]).tolist() == [2, 1]  # small: data kept
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], _expected(model), rtol=1e-5)


def test_full_model_has_every_weight_back() -> None:
    model = _model()
    sess = turnout.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    full = _by_name(sess._engine.full_model())
    for name, original in _by_name(model).items():
        np.testing.assert_array_equal(
            numpy_helper.to_array(full[name]), numpy_helper.to_array(original)
        )
    assert _by_name(sess._engine.model)["w"].raw_data == b""  # a copy: the session's stays light


def test_placing_again_shares_the_weight_arrays() -> None:
    sess = turnout.InferenceSession(
        _model().SerializeToString(), providers=["CPUExecutionProvider"]
    )
    before = sess._engine.graph.initializers["w"]
    sess.set_providers(["CPUExecutionProvider"])
    assert sess._engine.graph.initializers["w"] is before


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external-file"])
def test_the_saved_optimized_model_has_its_weights(tmp_path: Path, external: bool) -> None:
    out = tmp_path / "optimized.onnx"
    so = turnout.SessionOptions()
    so.optimized_model_filepath = str(out)
    if external:
        so.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", "weights.bin"
        )
    model = _model()
    turnout.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    saved = onnx.load(str(out))
    onnx.checker.check_model(saved)
    again = turnout.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(again.run(None, {"x": X})[0], _expected(model), rtol=1e-5)


@pytest.mark.parametrize("source", ["path", "bytes", "proto"])
def test_the_loaded_model_is_let_go_and_loaded_again_to_place_again(
    tmp_path: Path, source: str
) -> None:
    model = _model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    given: object = {"path": str(path), "bytes": model.SerializeToString(), "proto": model}[source]
    sess = turnout.InferenceSession(given, providers=["CPUExecutionProvider"])  # type: ignore[arg-type]
    assert sess._engine._loaded is None  # placed: its weights live in the IR only
    sess.set_providers(["CPUExecutionProvider"])
    assert sess._engine._loaded is None
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], _expected(model), rtol=1e-5)
