"""Error paths of the loss, quantization, padding and selection kernels on the emulated backend:
indices checked on the device name the node and the input, and a good run after a bad one
is not affected (the device flag does not stick). The node cases themselves run in
test_emulated_kernels.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import cpu_session, provider_session

F, I64, U8, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.UINT8, TensorProto.BOOL


def _model(node: Any, inputs: list[tuple[str, int, list[Any]]], opset: int = 18) -> Any:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_empty_tensor_value_info(o) for o in node.output],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model


@pytest.mark.parametrize("op", ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"])
def test_loss_target_out_of_range_names_node_and_input(op: str, emulated: str) -> None:
    node = helper.make_node(op, ["x", "t"], ["loss"], name="xent", ignore_index=-100)
    sess = provider_session(_model(node, [("x", F, [2, 3]), ("t", I64, [2])]), emulated)
    x = np.array([[0.1, 0.5, -1.0], [2.0, 0.0, 1.0]], np.float32)
    (ok,) = sess.run(None, {"x": x, "t": np.array([2, -100])})  # -100 ignored, 2 in range
    want = -(x[0, 2] if op != "SoftmaxCrossEntropyLoss" else x[0, 2] - np.log(np.exp(x[0]).sum()))
    np.testing.assert_allclose(ok, want, rtol=1e-6)
    with pytest.raises(InvalidArgument) as err:
        sess.run(None, {"x": x, "t": np.array([0, 3])})
    assert str(err.value) == (
        f"{op} node 'xent': a target in 't' is out of range [-3, 2] and not ignore_index -100 "
        "(checked on the device)"
    )
    (again,) = sess.run(None, {"x": x, "t": np.array([2, -100])})
    np.testing.assert_allclose(again, ok)


def test_compress_condition_past_the_end_is_flagged(emulated: str) -> None:
    node = helper.make_node("Compress", ["x", "c"], ["y"], name="pick", axis=0)
    sess = provider_session(_model(node, [("x", F, [3, 2]), ("c", B, [None])]), emulated)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    (y,) = sess.run(None, {"x": x, "c": np.array([True, False, True, False])})
    np.testing.assert_array_equal(y, x[[0, 2]])
    with pytest.raises(InvalidArgument, match="Compress node 'pick': the condition selects past"):
        sess.run(None, {"x": x, "c": np.array([True, False, False, True])})


def test_topk_k_larger_than_the_axis(emulated: str) -> None:
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="best", axis=1)
    sess = provider_session(_model(node, [("x", F, [2, 3]), ("k", I64, [1])]), emulated)
    x = np.array([[1, 3, 3], [0, -1, 5]], np.float32)
    v, i = sess.run(None, {"x": x, "k": np.array([2])})
    np.testing.assert_array_equal(i, [[1, 2], [2, 0]])  # ties: the lower index first
    np.testing.assert_array_equal(v, [[3, 3], [5, 0]])
    with pytest.raises(InvalidArgument, match=r"TopK node 'best': k=4 is outside \[0, 3\]"):
        sess.run(None, {"x": x, "k": np.array([4])})


def test_quantize_per_axis_scale_of_the_wrong_length(emulated: str) -> None:
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q", axis=1)
    model = _model(node, [("x", F, [2, 3]), ("s", F, [None]), ("z", U8, [None])])
    sess = provider_session(model, emulated)
    x = np.array([[0.0, 1.0, 2.5], [-1.0, 3.0, 4.0]], np.float32)
    (y,) = sess.run(None, {"x": x, "s": np.full(3, 0.5, np.float32), "z": np.full(3, 10, np.uint8)})
    np.testing.assert_array_equal(y, [[10, 12, 15], [8, 16, 18]])  # 2.5 / 0.5 = 5: exact
    with pytest.raises(InvalidArgument, match="does not match dimension 3 of axis 1"):
        sess.run(None, {"x": x, "s": np.ones(2, np.float32), "z": np.zeros(2, np.uint8)})


@pytest.mark.parametrize(
    "values",
    [[np.nan, 1.0, 2.0], [-np.inf, 1.0, 2.0], [np.inf, 1.0, 2.0], [np.nan] * 5, [0.5, -2.0]],
)
def test_dynamic_quantize_nan_and_inf_as_the_cpu_provider(
    values: list[float], emulated: str
) -> None:
    """NaNs left out of the range and quantized to 0, a range from -inf with zero point 255
    (`semantics.quant.dynamic_quant_range`), as the CPU provider and onnxruntime."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"])
    model = _model(node, [("x", F, [None])], opset=17)
    x = np.array(values, np.float32)
    want = cpu_session(model).run(None, {"x": x})
    got = provider_session(model, emulated).run(None, {"x": x})
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_quantize_nan_is_the_lowest_code(emulated: str) -> None:
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    model = _model(node, [("x", F, [None]), ("s", F, []), ("z", TensorProto.INT8, [])])
    feeds = {
        "x": np.array([np.nan, 1.0, -np.inf], np.float32),
        "s": np.array(0.1, np.float32),
        "z": np.array(-3, np.int8),
    }
    (y,) = provider_session(model, emulated).run(None, feeds)
    np.testing.assert_array_equal(y, [-128, 7, -128])


def test_reflect_pad_of_a_single_element_axis(emulated: str) -> None:
    node = helper.make_node("Pad", ["x", "p"], ["y"], name="grow", mode="reflect")
    sess = provider_session(_model(node, [("x", F, [None, None]), ("p", I64, [4])]), emulated)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = sess.run(None, {"x": x, "p": np.array([0, 1, 0, 1])})
    np.testing.assert_array_equal(y, np.pad(x, [(0, 0), (1, 1)], mode="reflect"))
    with pytest.raises(InvalidArgument, match="grow: reflect padding needs at least 2"):
        sess.run(None, {"x": x[:, :1], "p": np.array([0, 1, 0, 1])})


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("is_sorted", [1, 0])
def test_unique_groups_rows_as_the_numpy_kernels_do(
    axis: int | None, is_sorted: int, emulated: str
) -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(-2, 2, size=(6, 5, 3)).astype(np.float32)
    x[3] = x[1]  # repeated rows along axis 0
    x[:, 4] = x[:, 0]
    x[0, 0, 0] = x[2, 0, 0] = np.nan  # NaNs are equal to each other (equal_nan)
    attrs: dict[str, Any] = {"sorted": is_sorted} | ({} if axis is None else {"axis": axis})
    node = helper.make_node("Unique", ["x"], ["y", "i", "inv", "n"], name="uniq", **attrs)
    model = _model(node, [("x", F, [6, 5, 3])], opset=11)
    got = provider_session(model, emulated).run(None, {"x": x})
    want = cpu_session(model).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
