"""numba Softmax/LogSoftmax: the benchmark models' shapes, every axis and the opset < 13
flattening against onnxruntime, rows shorter and longer than the kernel's
partial-sum lanes, NaN/inf rows, float64/float16, and the parallel path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import one_node_model, provider_session, run_onnxruntime, run_reference

OPS = ["Softmax", "LogSoftmax"]


def _run(node: Any, x: np.ndarray, opset: int, threads: int = 1) -> np.ndarray:
    sess = provider_session(
        one_node_model(node, [x], opset), "NumbaExecutionProvider", intra_op_num_threads=threads
    )
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == x.dtype and y.shape == x.shape
    return np.asarray(y)


def _data(shape: tuple[int, ...], dt: Any = np.float32, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dt)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("shape", "axis", "threads"),
    [
        ((25, 1, 37), 2, 1),  # crnn_ocr_like: (steps, batch, classes)
        ((1, 40, 100), -1, 1),
        ((1, 10), 1, 1),  # text_cnn_like's classes
        ((1, 12, 128, 128), -1, 2),  # bert_like's attention scores, parallel rows
    ],
)
def test_model_shapes_vs_onnxruntime(
    op: str, shape: tuple[int, ...], axis: int, threads: int
) -> None:
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    x = _data(shape)
    got = _run(node, x, 17, threads)
    (want,) = run_onnxruntime(node, [x], 17)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6 if op == "Softmax" else 2e-6)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_every_axis_vs_onnxruntime(op: str, opset: int, axis: int) -> None:
    """opset 11 flattens to 2-D at `axis` (the rows kernel over the tail); opset 13 reduces
    over `axis` alone (the cols kernel where it is not the last). onnxruntime is the oracle:
    onnx.reference applies opset 13's rule to opset 11 too."""
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    x = _data((3, 5, 7), seed=axis + 10)
    got = _run(node, x, opset)
    (want,) = run_onnxruntime(node, [x], opset)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 64, 100, 257])
def test_row_lengths_around_the_lanes(n: int) -> None:
    """Rows that fill no block, one block exactly, blocks plus a tail (the sum's lanes)."""
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    x = _data((3, n), seed=n)
    got = _run(node, x, 17)
    (want,) = run_reference(node, [x], 17)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [-1, 0])
def test_nan_and_inf_rows(op: str, axis: int) -> None:
    """A NaN (either sign) or +inf in a row, or a row all -inf, makes the whole row NaN; a -inf
    among finite values gives 0 (log: -inf), as onnxruntime and onnx.reference do."""
    rows = [
        [1, 2, np.nan, 3, 0],
        [1, np.inf, 2, 3, 0],
        [-np.inf] * 5,
        [1, -np.inf, 2, 3, 0],
        [np.inf, np.inf, 0, 0, 0],
        [-np.nan, 1, 2, 3, 0],
        [1e30, -1e30, 88, -104, 0],
    ]
    x = np.array(rows, np.float32)
    x = np.ascontiguousarray(x if axis == -1 else x.T)
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    got = _run(node, x, 17)
    (want,) = run_onnxruntime(node, [x], 17)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dt", [np.float64, np.float16])
@pytest.mark.parametrize("op", OPS)
def test_other_float_types(dt: Any, op: str) -> None:
    node = helper.make_node(op, ["x"], ["y"], axis=-1)
    x = _data((4, 45), dt)
    got = _run(node, x, 17)
    (want,) = run_reference(node, [x.astype(np.float64)], 17)
    tol = 1e-12 if dt == np.float64 else 2e-3
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_varying_shapes_and_bad_axis() -> None:
    """One session at several shapes (plans are per shape), then a rank the axis does not fit:
    a typed error naming the node."""
    node = helper.make_node("Softmax", ["x"], ["y"], axis=2, name="my_softmax")
    x = _data((2, 3, 4))
    model = one_node_model(node, [x], 17)
    model.graph.input[0].type.tensor_type.ClearField("shape")
    sess = provider_session(model, "NumbaExecutionProvider")
    for shape in [(2, 3, 4), (1, 1, 9), (5, 2, 3, 1), (2, 3, 4)]:
        v = _data(shape, seed=len(shape))
        (got,) = sess.run(None, {"x": v})
        (want,) = run_reference(node, [v], 17)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    with pytest.raises(InvalidArgument, match=r"my_softmax.*axis 2"):
        sess.run(None, {"x": _data((3, 4))})
