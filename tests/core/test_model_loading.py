"""Loading: every source form, external data inside the folder only, clear errors."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.errors import Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, NoSuchFile
from turnout.graph.tensors import decode_tensor


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


def test_newest_ml_opset_is_the_newest_ml_schema() -> None:
    """The loader's bound on ai.onnx.ml comes from onnx's registry, not a walk over every
    schema: both give the same version."""
    from turnout.graph.model import _MAX_OPSET

    newest = max(
        s.since_version
        for s in onnx.defs.get_all_schemas_with_history()
        if s.domain == "ai.onnx.ml"
    )
    assert _MAX_OPSET["ai.onnx.ml"] == newest


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
    with pytest.raises(Fail, match=r"com\.example.*frob"):
        turnout.InferenceSession(model)


def test_dangling_input_is_refused_as_onnxruntime_does() -> None:
    g = helper.make_graph(
        [helper.make_node("Relu", ["nowhere"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InvalidArgument, match="input 'nowhere' of node 'Relu'"):
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


def _sparse_model(tmp_path: pathlib.Path, location: str, data: bytes) -> pathlib.Path:
    """y = x + dense(w), where w is a sparse initializer whose values live in `location`."""
    values = helper.make_tensor("w_values", TensorProto.FLOAT, [2], [0.0, 0.0])
    values.ClearField("float_data")
    values.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "8")):
        values.external_data.add(key=key, value=value)
    indices = numpy_helper.from_array(np.array([1, 3], np.int64), "w_indices")
    sparse = helper.make_sparse_tensor(values, indices, [4])
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w_values"], ["y"])],
        "sparse_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        sparse_initializer=[sparse],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "values.bin").write_bytes(data)
    path = model_dir / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_sparse_external_data_is_read_beside_the_model(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The values are found beside the model whatever the current folder is."""
    path = _sparse_model(tmp_path, "values.bin", np.array([2, 5], np.float32).tobytes())
    monkeypatch.chdir(tmp_path)
    (y,) = turnout.InferenceSession(str(path)).run(None, {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(y, [1, 3, 1, 6])


def test_sparse_external_data_cannot_escape_the_model_folder(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret in the current folder (or above the model's) is never read (it once was)."""
    secret = np.array([7, 7], np.float32).tobytes()
    (tmp_path / "secret.bin").write_bytes(secret)
    monkeypatch.chdir(tmp_path)
    escaping = _sparse_model(tmp_path, "../secret.bin", secret)
    with pytest.raises(InvalidGraph, match=r"escapes the model.s folder"):
        turnout.InferenceSession(str(escaping))
    beside_cwd = tmp_path / "other"
    beside_cwd.mkdir()
    missing = _sparse_model(beside_cwd, "secret.bin", b"")
    (missing.parent / "values.bin").unlink()
    with pytest.raises(NoSuchFile, match=r"secret\.bin"):
        turnout.InferenceSession(str(missing))


def _external_with(tmp_path: pathlib.Path, **entries: str) -> pathlib.Path:
    path = _save_external(_add_model(np.arange(4, dtype=np.float32)), tmp_path, "w.bin")
    model = onnx.load(path, load_external_data=False)
    t = model.graph.initializer[0]
    for entry in t.external_data:
        if entry.key in entries:
            entry.value = entries.pop(entry.key)
    for key, value in entries.items():
        t.external_data.add(key=key, value=value)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(
    "entries",
    [
        {"length": str(2**40)},  # once a bare MemoryError: the read was sized first
        {"offset": str(2**62)},  # once OSError [Errno 22]
        {"offset": "8", "length": "16"},
    ],
    ids=["huge-length", "huge-offset", "past-the-end"],
)
def test_external_data_range_outside_the_file_names_the_tensor(
    tmp_path: pathlib.Path, entries: dict[str, str]
) -> None:
    path = _external_with(tmp_path, **entries)
    with pytest.raises(Fail, match=r"initializer: w offset.*file_length: 16 are out of bounds"):
        turnout.InferenceSession(str(path))


@pytest.mark.parametrize("entries", [{"offset": "-4"}, {"length": "many"}])
def test_external_data_offset_or_length_not_a_count_names_the_tensor(
    tmp_path: pathlib.Path, entries: dict[str, str]
) -> None:
    path = _external_with(tmp_path, **entries)
    with pytest.raises(InvalidGraph, match=r"external data of 'w'"):
        turnout.InferenceSession(str(path))


def test_external_data_location_with_a_nul_byte_is_refused(tmp_path: pathlib.Path) -> None:
    path = _external_with(tmp_path, location="w.bin\0.txt")
    with pytest.raises(InvalidGraph, match="NUL byte"):
        turnout.InferenceSession(str(path))


def _with_initializer(t: TensorProto) -> bytes:
    model = _add_model(np.zeros(4, np.float32))
    model.graph.initializer[0].CopyFrom(t)
    return model.SerializeToString()


def test_short_raw_data_names_the_tensor() -> None:
    t = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    t.raw_data = t.raw_data[:4]  # once "cannot reshape array of size 1 into shape (4,)"
    with pytest.raises(InvalidGraph, match=r"tensor name: w"):  # onnx.checker says so
        turnout.InferenceSession(_with_initializer(t))
    untyped = onnx.ModelProto()
    untyped.ParseFromString(_with_initializer(t))
    untyped.graph.output[0].ClearField("type")  # checked with a placeholder type: same error
    with pytest.raises(InvalidGraph, match=r"tensor name: w"):
        turnout.InferenceSession(untyped.SerializeToString())
    with pytest.raises(Fail, match=r"cannot decode tensor 'w'"):  # past the checker, too
        decode_tensor(t, "model.onnx")


def test_unknown_data_type_names_the_tensor() -> None:
    t = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    t.data_type = 999  # once a bare KeyError: 999
    with pytest.raises(Fail, match=r"tensor 'w' has unknown data type 999"):
        turnout.InferenceSession(_with_initializer(t))


def test_typed_data_of_the_wrong_count_names_the_tensor() -> None:
    t = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    del t.float_data[2:]
    with pytest.raises(Fail, match=r"tensor 'w' of shape \[4\] needs 4 values"):
        turnout.InferenceSession(_with_initializer(t))


def test_constant_with_a_sparse_value_runs() -> None:
    """A sparse constant is dense to the nodes that read it; as a graph output it would come
    back sparse, which onnxruntime does for 2-D values only (a 1-D one fails the run)."""
    values = numpy_helper.from_array(np.array([5, 6], np.float32), "v")
    indices = numpy_helper.from_array(np.array([0, 2], np.int64), "i")
    node = helper.make_node(
        "Constant", [], ["c"], sparse_value=helper.make_sparse_tensor(values, indices, [3])
    )
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("y", "c")]
    g = helper.make_graph([node, helper.make_node("Identity", ["c"], ["y"])], "c", [], out)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    session = turnout.InferenceSession(model.SerializeToString())
    (y,) = session.run(["y"], {})
    np.testing.assert_array_equal(y, [5, 0, 6])
    with pytest.raises(Fail, match="2-D"):
        session.run(["c"], {})


def test_ir3_model_with_weights_outside_the_graph_inputs_runs() -> None:
    """onnxruntime runs IR 3 models whose initializers are not graph inputs (its own test
    models are such); the checker alone would refuse them."""
    w = np.arange(4, dtype=np.float32)
    model = _add_model(w)
    model.ir_version = 3
    (y,) = turnout.InferenceSession(model.SerializeToString()).run(
        None, {"x": np.ones(4, np.float32)}
    )
    np.testing.assert_array_equal(y, w + 1)


def test_a_model_without_ir_version_is_refused_as_onnxruntime_does() -> None:
    model = _add_model(np.zeros(4, np.float32))
    model.ClearField("ir_version")
    with pytest.raises(Fail, match="no ir_version"):
        turnout.InferenceSession(model.SerializeToString())


def test_an_output_declared_with_an_empty_type_loads_as_in_onnxruntime() -> None:
    model = _add_model(np.zeros(4, np.float32))
    model.graph.output[0].type.CopyFrom(onnx.TypeProto())
    (y,) = turnout.InferenceSession(model.SerializeToString()).run(
        None, {"x": np.ones(4, np.float32)}
    )
    np.testing.assert_array_equal(y, np.ones(4, np.float32))
