"""Error paths of the indexed and sampling ops on the emulated backend: an index read from
device data that is out of range fails the run with an `InvalidArgument` naming the node and the
input, and the next good run is unaffected; repeated scatter positions fold with every
reduction; RoiAlign's batch indices (read on the host) and SwiGLU's shapes are checked too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import provider_session


def _model(op: str, inputs: list[tuple[str, int, list[int]]], **attrs: Any) -> bytes:
    node = helper.make_node(op, [n for n, _, _ in inputs], ["y"], name="idx_node", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _bad_run(sess: Any, feeds: dict[str, np.ndarray], expected: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        sess.run(None, feeds)
    assert "'idx_node'" in str(err.value) and expected in str(err.value), str(err.value)


def test_scatter_elements_bad_index(emulated: str) -> None:
    model = _model("ScatterElements", [("x", F, [3, 2]), ("i", I64, [1, 2]), ("u", F, [1, 2])])
    sess = provider_session(model, emulated)
    x = np.zeros((3, 2), np.float32)
    u = np.ones((1, 2), np.float32)
    _bad_run(sess, {"x": x, "i": np.array([[0, 3]]), "u": u}, "an index in 'i' is out of range")
    (y,) = sess.run(None, {"x": x, "i": np.array([[2, -1]]), "u": u})
    np.testing.assert_array_equal(y, [[0, 0], [0, 0], [1, 1]])


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [("add", [8.0, 1.0]), ("mul", [12.0, 1.0]), ("max", [3.0, 1.0]), ("min", [1.0, 1.0])],
)
def test_scatter_nd_repeated_positions_fold(
    reduction: str, expected: list[float], emulated: str
) -> None:
    model = _model(
        "ScatterND",
        [("x", F, [2]), ("i", I64, [3, 1]), ("u", F, [3])],
        reduction=reduction,
    )
    sess = provider_session(model, emulated)
    x = np.ones(2, np.float32)
    u = np.array([2, 3, 2], np.float32)  # three updates of position 0
    (y,) = sess.run(None, {"x": x, "i": np.array([[0], [0], [0]]), "u": u})
    np.testing.assert_array_equal(y, expected)


def test_scatter_nd_bad_index(emulated: str) -> None:
    model = _model("ScatterND", [("x", F, [2, 3]), ("i", I64, [1, 2]), ("u", F, [1])])
    sess = provider_session(model, emulated)
    _bad_run(
        sess,
        {"x": np.zeros((2, 3), np.float32), "i": np.array([[1, 3]]), "u": np.ones(1, np.float32)},
        "out of range [-3, 2] for axis 1",
    )


def test_gather_nd_bad_index(emulated: str) -> None:
    model = _model("GatherND", [("x", F, [2, 3]), ("i", I64, [2, 1])])
    sess = provider_session(model, emulated)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _bad_run(sess, {"x": x, "i": np.array([[1], [-3]])}, "out of range [-2, 1] for axis 0")
    (y,) = sess.run(None, {"x": x, "i": np.array([[1], [-2]])})
    np.testing.assert_array_equal(y, x[[1, 0]])


def test_max_unpool_bad_index(emulated: str) -> None:
    model = _model(
        "MaxUnpool",
        [("x", F, [1, 1, 2, 2]), ("i", I64, [1, 1, 2, 2])],
        kernel_shape=[2, 2],
        strides=[2, 2],
    )
    sess = provider_session(model, emulated)
    x = np.ones((1, 1, 2, 2), np.float32)
    _bad_run(
        sess, {"x": x, "i": np.array([0, 5, 10, 16]).reshape(1, 1, 2, 2)}, "out of range [0, 15]"
    )


def test_reverse_sequence_bad_length(emulated: str) -> None:
    model = _model(
        "ReverseSequence", [("x", F, [3, 2]), ("n", I64, [2])], time_axis=0, batch_axis=1
    )
    sess = provider_session(model, emulated)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    _bad_run(sess, {"x": x, "n": np.array([4, 1])}, "a length in 'n' is out of range [0, 3]")
    (y,) = sess.run(None, {"x": x, "n": np.array([3, 1])})
    np.testing.assert_array_equal(y, [[4, 1], [2, 3], [0, 5]])


def test_roi_align_bad_batch_index(emulated: str) -> None:
    model = _model(
        "RoiAlign",
        [("x", F, [1, 1, 4, 4]), ("rois", F, [1, 4]), ("b", I64, [1])],
        output_height=2,
        output_width=2,
    )
    sess = provider_session(model, emulated)
    feeds = {"x": np.ones((1, 1, 4, 4), np.float32), "rois": np.array([[0, 0, 3, 3]], np.float32)}
    _bad_run(sess, {**feeds, "b": np.array([1])}, "a batch index in 'b' is out of range [0, 0]")
    (y,) = sess.run(None, {**feeds, "b": np.array([0])})
    np.testing.assert_allclose(y, np.ones((1, 1, 2, 2)))


def test_swiglu_shapes_must_match(emulated: str) -> None:
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"], name="idx_node")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, F, None) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])
    sess = provider_session(model, emulated)
    a = np.array([1.0, -2.0], np.float32)
    _bad_run(sess, {"a": a, "b": np.ones(3, np.float32)}, "must have the same shape")
    (y,) = sess.run(None, {"a": a, "b": np.full(2, 2.0, np.float32)})
    np.testing.assert_allclose(y, 2 * a / (1 + np.exp(-a)), rtol=1e-6)
