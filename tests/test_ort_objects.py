"""onnxruntime's object API on turnout's sessions, options, values and bindings, side by side
with onnxruntime 1.32 as the oracle: errors, session and options members, OrtValueVector,
DLPack, devices and sparse tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import turnout as tn
from turnout.capi.onnxruntime_pybind11_state import InvalidArgument as CapiInvalidArgument

CPU = ["CPUExecutionProvider"]
X = np.arange(6, dtype=np.float32).reshape(2, 3)


def add_model(y_shape: list[Any] | None = None, optional_input: bool = False) -> bytes:
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape or ["N", 3]),
    ]
    if optional_input:
        opt = helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])
        opt.type.CopyFrom(helper.make_optional_type_proto(opt.type))
        inputs.append(opt)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"])],
        "g",
        inputs,
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def both(model: bytes, **kw: Any) -> tuple[Any, Any]:
    return tn.InferenceSession(model, providers=CPU, **kw), ort.InferenceSession(
        model, providers=CPU, **kw
    )


# -- errors as onnxruntime gives them -----------------------------------------------------------

BAD = {
    "missing": (None, {"y": X}),
    "missing_two_unknown_one": (None, {"q": X}),
    "nothing": (None, {}),
    "dtype": (None, {"x": X.astype(np.float64), "y": X}),
    "dtype_before_rank": (None, {"x": X[0].astype(np.float64), "y": X}),
    "string_dtype": (None, {"x": np.array([["a"] * 3] * 2), "y": X}),
    "rank": (None, {"x": X[0], "y": X}),
    "dims": (None, {"x": np.ones((3, 4), np.float32), "y": X}),
    "symbolic_dim_ok_other_bad": (None, {"x": X, "y": np.ones((5, 4), np.float32)}),
    "unknown_output": (["z", "w"], {"x": X, "y": X}),
    "unknown_input": (None, {"x": X, "y": X, "q": X}),
    "python_scalar": (None, {"x": 3.0, "y": X}),
    "numpy_scalar": (None, {"x": np.float32(1), "y": X}),
    "string": (None, {"x": "abc", "y": X}),
    "tuple": (None, {"x": (1.0, 2.0), "y": X}),
}


def _error(call: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.mark.parametrize("case", list(BAD))
def test_feed_errors_read_as_onnxruntime_s(case: str) -> None:
    names, feed = BAD[case]
    sess, ref = both(add_model())
    ours = _error(lambda: sess.run(names, feed))
    theirs = _error(lambda: ref.run(names, feed))
    # turnout's detail, if any, follows ORT's text on a line of its own
    text = str(theirs)
    assert str(ours)[: len(text)] == text
    assert str(ours)[len(text) :][:1] in ("", "\n")
    # ORT's class (or a builtin base of it) catches ours, and ORT-named classes map across
    theirs_cls = type(theirs)
    if theirs_cls.__module__ == "builtins":
        assert isinstance(ours, theirs_cls)
    else:
        assert type(theirs).__name__ == "InvalidArgument"
        assert isinstance(ours, CapiInvalidArgument)


def test_missing_input_text_through_every_run_form() -> None:
    sess, ref = both(add_model())
    feeds_t = {"y": tn.OrtValue.ortvalue_from_numpy(X)}
    feeds_o = {"y": ort.OrtValue.ortvalue_from_numpy(X)}
    ours = _error(lambda: sess.run_with_ort_values(None, feeds_t))
    theirs = _error(lambda: ref.run_with_ort_values(None, feeds_o))
    assert (
        str(ours) == str(theirs) == "Required inputs (['x']) are missing from input feed (['y'])."
    )
    assert isinstance(ours, ValueError)


def test_optional_typed_input_may_be_left_out_as_in_onnxruntime() -> None:
    sess, ref = both(add_model(optional_input=True))
    feed = {"x": X, "y": X}
    np.testing.assert_array_equal(sess.run(None, feed)[0], ref.run(None, feed)[0])
