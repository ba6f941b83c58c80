"""Pools over an input shorter than their (dilated) kernel give onnxruntime's answers.

onnxruntime divides (padded input - kernel) by the stride truncating toward zero: a window
longer than the padded input by less than a stride still gives one output (a narrow text crop
reaching an OCR model's late MaxPool), by less than two strides an empty axis, and an error
beyond. The ONNX formula (floor) gives no window; turnout refused them all before. Convs keep
refusing, as onnxruntime does."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.errors import InvalidArgument

CASES = [  # kernel, stride, input width, attributes
    (2, 2, 1, {}),
    (3, 3, 1, {}),
    (3, 3, 2, {}),
    (5, 4, 2, {}),
    (2, 2, 1, {"ceil_mode": 1}),
    (3, 2, 1, {"pads": [0, 1, 0, 0]}),
    (3, 2, 1, {}),  # short by a stride: an empty axis
    (2, 2, 1, {"dilations": [2, 2]}),  # the dilated kernel is short by a stride
]
OPS = ["MaxPool", "AveragePool", "LpPool"]


def _model(op: str, k: int, stride: int, attrs: dict[str, Any], opset: int = 19) -> bytes:
    node = helper.make_node(
        op, ["x"], ["y"], kernel_shape=[k, k], strides=[stride, stride], **attrs
    )
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _onnxruntime(model: bytes, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    return np.asarray(y)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("k", "stride", "width", "attrs"), CASES)
def test_pool_over_a_short_input_matches_onnxruntime(
    op: str, k: int, stride: int, width: int, attrs: dict[str, Any]
) -> None:
    model = _model(op, k, stride, attrs)
    x = np.random.default_rng(k * 10 + width).standard_normal((2, 3, 12, width)).astype(np.float32)
    expected = _onnxruntime(model, x)
    sess = turnout.InferenceSession(model, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_average_pool_counts_no_cell_past_the_padded_input() -> None:
    """count_include_pad counts the explicit pads, not the cells past them (onnxruntime's
    AveragePool from opset 19)."""
    model = _model("AveragePool", 3, 3, {"pads": [0, 1, 0, 0], "count_include_pad": 1})
    x = np.ones((2, 3, 12, 1), np.float32)
    (y,) = turnout.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(y, _onnxruntime(model, x))
    np.testing.assert_allclose(y, 0.5)  # 3 ones over 3 rows x (1 pad + 1 pixel)


@pytest.mark.parametrize("op", OPS)
def test_pool_short_by_two_strides_is_refused_naming_the_node(op: str) -> None:
    sess = turnout.InferenceSession(_model(op, 3, 1, {}), providers=["CPUExecutionProvider"])
    with pytest.raises(InvalidArgument, match=rf"{op}_0: kernel .* larger than padded input"):
        sess.run(None, {"x": np.zeros((2, 3, 12, 1), np.float32)})


def test_conv_over_a_short_input_is_still_refused() -> None:
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], name="c")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 2, 2], [0.5] * 48)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()
    sess = turnout.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(InvalidArgument, match=r"c: kernel .* larger than padded input"):
        sess.run(None, {"x": np.zeros((1, 3, 12, 1), np.float32)})
