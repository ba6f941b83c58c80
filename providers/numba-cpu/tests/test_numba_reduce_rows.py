"""Reductions over the last axes (`post == 1`): the row branch with independent accumulators
(ReduceMax of floats: pool.row_max), checked against onnx.reference for every kind, row
lengths around the lane count, NaN and infinite values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from turnout.tools.testing import one_node_model, provider_session, run_reference

KINDS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceProd",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceMax",
    "ReduceMin",
]


def _check(op: str, x: np.ndarray, axes: list[int], keepdims: int) -> None:
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    inputs = [x, np.array(axes, np.int64)]
    sess = provider_session(one_node_model(node, inputs, 18), "NumbaExecutionProvider")
    assert {a.source for a in sess.partition_report().assignments} == {"numba"}
    (got,) = sess.run(None, {"x": x, "axes": inputs[1]})
    (want,) = run_reference(node, inputs, 18)
    assert got.dtype == want.dtype and got.shape == want.shape
    if x.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", KINDS)
@pytest.mark.parametrize("red", [1, 7, 8, 9, 125])
def test_row_reduction_float(op: str, red: int) -> None:
    rng = np.random.default_rng(red)
    x = rng.uniform(0.5, 1.5, (3, 5, red)).astype(np.float32)
    if op not in ("ReduceProd", "ReduceLogSum"):
        x = x * rng.choice([-1.0, 1.0], x.shape).astype(np.float32)
    _check(op, x, [2], 1)
    _check(op, x.astype(np.float64), [-1], 0)
    _check(op, x, [1, 2], 0)  # two trailing axes: rows of 5 * red


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum"])
def test_row_reduction_nan_and_ints(op: str) -> None:
    x = np.arange(2 * 3 * 11, dtype=np.float32).reshape(2, 3, 11) - 30
    x[0, 1, 9] = np.nan  # in the lanes' tail
    x[1, 2, 3] = np.nan  # in a lane
    x[1, 0, 0] = np.nan  # the lanes' first value
    x[0, 2, 4] = np.inf
    x[0, 0, 5] = -np.inf
    _check(op, x, [2], 1)
    _check(op, x.astype(np.float64), [2], 0)
    _check(op, (np.nan_to_num(x, posinf=99, neginf=-99) * 3).astype(np.int32), [2], 0)
    x = np.random.default_rng(1).standard_normal((100, 125)).astype(np.float32)
    x[7, 124] = np.nan  # text_cnn_like's max over time: a NaN in the tail of one long row
    _check(op, x, [1], 0)
