"""LoRA adapters in onnxruntime's adapter format, side by side with onnxruntime 1.32: files that
either writes, the other reads; active adapters' parameters feed the inputs of their names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout as tn
from turnout.api.lora import AdapterFormat, LoraAdapter

CPU = ["CPUExecutionProvider"]
W0 = np.ones((2, 3), np.float32)
X = np.arange(6, dtype=np.float32).reshape(2, 3)

PARAMS = {
    "W": np.full((2, 3), 10, np.float32),
    "h": np.arange(6, dtype=np.float16).reshape(1, 2, 3),
    "i": np.arange(5, dtype=np.int64),
    "u": np.arange(7, dtype=np.uint8),
    "e": np.zeros((0, 3), np.float64),
}


def model(w_is_input: bool = True) -> bytes:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    if w_is_input:
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [2, 3]))
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["z"])],
        "g",
        inputs,
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(W0, "W")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def write(mod: Any, path: Path, params: dict[str, np.ndarray], av: int = 0, mv: int = 0) -> None:
    fmt = mod.AdapterFormat()
    fmt.set_adapter_version(av)
    fmt.set_model_version(mv)
    fmt.set_parameters({k: mod.OrtValue.ortvalue_from_numpy(v) for k, v in params.items()})
    fmt.export_adapter(str(path))


def load(mod: Any, path: Path) -> Any:
    adapter = mod.LoraAdapter()
    adapter.Load(str(path))
    return adapter


@pytest.mark.parametrize("writer", ["turnout", "onnxruntime"])
@pytest.mark.parametrize("reader", ["turnout", "onnxruntime"])
def test_adapter_files_round_trip_across_both(tmp_path: Path, writer: str, reader: str) -> None:
    mods = {"turnout": tn, "onnxruntime": ort}
    path = tmp_path / "a.onnx_adapter"
    write(mods[writer], path, PARAMS, av=3, mv=7)
    got = mods[reader].AdapterFormat.read_adapter(str(path))
    assert (got.get_format_version(), got.get_adapter_version(), got.get_model_version()) == (
        1,
        3,
        7,
    )
    params = {k: v.numpy() for k, v in got.get_parameters().items()}
    assert sorted(params) == sorted(PARAMS)
    for k, v in PARAMS.items():
        assert params[k].dtype == v.dtype and params[k].shape == v.shape
        np.testing.assert_array_equal(params[k], v)
    load(mods[reader], path)


def test_read_parameters_share_the_file_mapping(tmp_path: Path) -> None:
    path = tmp_path / "a.onnx_adapter"
    write(ort, path, {"W": PARAMS["W"]})
    got = AdapterFormat.read_adapter(path).get_parameters()["W"].numpy()
    assert not got.flags.writeable and not got.flags.owndata


@pytest.mark.parametrize("writer", ["turnout", "onnxruntime"])
def test_active_adapters_feed_their_parameters_as_onnxruntime(tmp_path: Path, writer: str) -> None:
    mod_w = tn if writer == "turnout" else ort
    for name, value in (("a10", 10), ("a20", 20), ("a30", 30.0)):
        dtype = np.float64 if name == "a30" else np.float32
        write(mod_w, tmp_path / name, {"W": np.full((2, 3), value, dtype)})
    sessions = {
        mod: mod.InferenceSession(model(), providers=CPU) for mod in (tn, ort)
    }  # fmt: skip
    results: dict[str, list[Any]] = {}
    for mod, sess in sessions.items():
        a10, a20, a30 = (load(mod, tmp_path / n) for n in ("a10", "a20", "a30"))
        out = []
        for active, feed in (
            ([a10], {"x": X}),
            ([a10], {"x": X, "W": W0 * 2}),  # the adapter's parameter wins over the feed
            ([a10, a20], {"x": X}),  # the adapter activated first wins
            ([a20, a10], {"x": X}),
            ([], {"x": X}),  # nothing active: the initializer
        ):
            ro = mod.RunOptions()
            for a in active:
                ro.add_active_adapter(a)
            out.append(sess.run(None, feed, ro)[0])
        ro = mod.RunOptions()
        ro.add_active_adapter(a30)  # float64 for a float input: the feed's dtype error
        with pytest.raises(Exception, match=r"Unexpected input data type") as e:
            sess.run(None, {"x": X}, ro)
        assert type(e.value).__name__ == "InvalidArgument"
        results[mod.__name__] = out
    for ours, theirs in zip(results["turnout"], results["onnxruntime"]):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(results["turnout"][0], X + 10)
    np.testing.assert_array_equal(results["turnout"][3], X + 20)


def test_adapter_parameter_must_name_an_input(tmp_path: Path) -> None:
    write(ort, tmp_path / "a", {"W": PARAMS["W"]})
    write(ort, tmp_path / "q", {"Q": PARAMS["W"]})
    for mod in (tn, ort):
        for m, adapter, text in (
            (model(w_is_input=False), "a", "Invalid input name: W"),
            (model(), "q", "Invalid input name: Q"),
        ):
            sess = mod.InferenceSession(m, providers=CPU)
            ro = mod.RunOptions()
            active = load(mod, tmp_path / adapter)  # onnxruntime's RunOptions holds no reference
            ro.add_active_adapter(active)
            with pytest.raises(Exception, match=text) as e:
                sess.run(None, {"x": X}, ro)
            assert type(e.value).__name__ == "InvalidArgument"


def test_unreadable_adapters_fail_as_in_onnxruntime(tmp_path: Path) -> None:
    (tmp_path / "junk").write_bytes(b"x" * 16)
    write(ort, tmp_path / "scalar", {"s": np.array(5, np.int64)})
    write(ort, tmp_path / "bool", {"b": np.array([True])})
    for name, text in (
        ("junk", "does not appear to be a valid lora parameter format"),
        ("scalar", "dims is missing or empty"),
        ("bool", "not a supported LoRA parameter type"),
    ):
        for mod in (tn, ort):
            with pytest.raises(RuntimeError, match=text):
                load(mod, tmp_path / name)
    with pytest.raises(FileNotFoundError):
        load(tn, tmp_path / "absent")
    with pytest.raises(RuntimeError):
        load(ort, tmp_path / "absent")


def test_create_from_array_and_add_active_adapter_type(tmp_path: Path) -> None:
    write(tn, tmp_path / "a", {"W": PARAMS["W"]})
    adapter = LoraAdapter.create_from_array((tmp_path / "a").read_bytes())
    assert sorted(adapter.parameters) == ["W"]
    assert sorted(LoraAdapter.create_from_file(tmp_path / "a").parameters) == ["W"]
    with pytest.raises(TypeError):
        tn.RunOptions().add_active_adapter("a")
    with pytest.raises(TypeError):
        ort.RunOptions().add_active_adapter("a")
