"""Loading: every source form, external data inside the folder only, clear errors."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.errors import InvalidGraph, InvalidProtobuf, NoSuchFile


def _add_model(weight: np.ndarray) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "add_w",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(weight, "w")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _save_external(model: onnx.ModelProto, folder: pathlib.Path, location: str) -> pathlib.Path:
    path = folder / "model.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location=location, size_threshold=0)
    return path


def test_every_source_form_runs() -> None:
    w = np.arange(4, dtype=np.float32)
    model = _add_model(w)
    x = np.ones(4, np.float32)
    for source in (model, model.SerializeToString()):
        (y,) = turnout.InferenceSession(source).run(None, {"x": x})
        np.testing.assert_array_equal(y, x + w)


def test_path_and_pathlib(tmp_path: pathlib.Path) -> None:
    w = np.arange(4, dtype=np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(_add_model(w), path)
    for source in (str(path), path):
        (y,) = turnout.InferenceSession(source).run(None, {"x": np.zeros(4, np.float32)})
        np.testing.assert_array_equal(y, w)


def test_external_data_inside_folder_is_loaded(tmp_path: pathlib.Path) -> None:
    w = np.random.default_rng(0).standard_normal(4).astype(np.float32)
    path = _save_external(_add_model(w), tmp_path, "weights.bin")
    assert (tmp_path / "weights.bin").stat().st_size == w.nbytes
    (y,) = turnout.InferenceSession(str(path)).run(None, {"x": np.ones(4, np.float32)})
    np.testing.assert_allclose(y, w + 1)


def test_external_data_escaping_the_folder_is_refused(tmp_path: pathlib.Path) -> None:
    w = np.arange(4, dtype=np.float32)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    path = _save_external(_add_model(w), model_dir, "weights.bin")
    # Move the data outside and point the model at it with a relative path that climbs out.
    (model_dir / "weights.bin").rename(tmp_path / "weights.bin")
    model = onnx.load(path, load_external_data=False)
    for t in model.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = "../weights.bin"
    onnx.save(model, path)
    with pytest.raises(InvalidGraph, match=r"escapes the model.s folder"):
        turnout.InferenceSession(str(path))


def test_external_data_absolute_location_is_refused(tmp_path: pathlib.Path) -> None:
    path = _save_external(_add_model(np.arange(4, dtype=np.float32)), tmp_path, "w.bin")
    model = onnx.load(path, load_external_data=False)
    for t in model.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = str(tmp_path / "w.bin")
    onnx.save(model, path)
    with pytest.raises(InvalidGraph, match="escapes"):
        turnout.InferenceSession(str(path))


def test_missing_file() -> None:
    with pytest.raises(NoSuchFile, match=r"nope\.onnx"):
        turnout.InferenceSession("/nonexistent/nope.onnx")


def test_malformed_protobuf() -> None:
    with pytest.raises(InvalidProtobuf):
        turnout.InferenceSession(b"\x08\x07garbage-that-is-not-a-model\xff\xff")


def test_unsupported_opset() -> None:
    model = _add_model(np.zeros(4, np.float32))
    model.opset_import[0].version = 999
    with pytest.raises(InvalidGraph, match="opset 999"):
        turnout.InferenceSession(model)


def test_unknown_domain_names_the_node() -> None:
    g = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="frob")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    with pytest.raises(InvalidGraph, match=r"com\.example.*frob"):
        turnout.InferenceSession(model)


def test_invalid_graph_dangling_input() -> None:
    g = helper.make_graph(
        [helper.make_node("Relu", ["nowhere"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InvalidGraph, match="nowhere"):
        turnout.InferenceSession(model)


def test_model_local_function_is_expanded() -> None:
    fn = helper.make_function(
        "local",
        "AddRelu",
        ["a", "b"],
        ["c"],
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["c"])],
        [helper.make_opsetid("", 17)],
    )
    g = helper.make_graph(
        [helper.make_node("AddRelu", ["x", "y"], ["z"], domain="local")],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(
        g,
        functions=[fn],
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
    )
    x = np.array([-1, 0, 2], np.float32)
    y = np.array([0.5, -1, 1], np.float32)
    (z,) = turnout.InferenceSession(model).run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(z, np.maximum(x + y, 0))
