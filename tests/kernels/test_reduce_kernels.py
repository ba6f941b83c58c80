"""CPU reduction kernels (Reduce*, ArgMax/Min, softmax family, CumSum, TopK) vs the references."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    NodeCase,
    check_official_case,
    iter_node_cases,
    run_own_kernel,
)

REDUCE = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
]
OPS = set(REDUCE) | {"ArgMax", "ArgMin", "Softmax", "LogSoftmax", "Hardmax", "CumSum", "TopK"}

CASES = list(iter_node_cases(OPS))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_node_case(case: NodeCase) -> None:
    check_official_case(case)


# --------------------------------------------------------------------------------------------
# Reduce*


AXES = [None, [1], [-1], [0, 2], [2, 0, 1]]


def _reduce_input(
    rng: np.random.Generator, op: str, dtype: Any, shape: tuple[int, ...] = (3, 4, 5)
) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return rng.integers(1, 4, shape).astype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    return np.abs(x) + dtype(0.5) if op == "ReduceLogSum" else x


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(
    op: str, axes: list[int] | None, keepdims: int, rng: np.random.Generator, check: Any
) -> None:
    x = _reduce_input(rng, op, np.float32)
    opset = 13 if op == "ReduceSum" else 18
    if axes is None:
        node = helper.make_node(op, ["x"], ["y"], keepdims=keepdims)
        check(node, [x], opset)
    else:
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
        check(node, [x, np.array(axes, np.int64)], opset)


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes", AXES, ids=str)
def test_reduce_axes_attribute(
    op: str, axes: list[int] | None, rng: np.random.Generator, check: Any
) -> None:
    x = _reduce_input(rng, op, np.float64)
    kw = {} if axes is None else {"axes": axes}
    check(helper.make_node(op, ["x"], ["y"], keepdims=0, **kw), [x], 11)


@pytest.mark.parametrize("op", REDUCE)
def test_reduce_noop_with_empty_axes(op: str, rng: np.random.Generator, check: Any) -> None:
    x = _reduce_input(rng, op, np.float32)
    opset = 13 if op == "ReduceSum" else 18
    node = helper.make_node(op, ["x", "axes"], ["y"], noop_with_empty_axes=1)
    # nothing is reduced, but the elementwise part still applies (SumSquare squares, L1 and L2
    # take |x|, LogSum the log), as in onnxruntime and onnx.reference; all exact but the log
    feeds = [x, np.array([], np.int64)]
    exact = {} if op == "ReduceLogSum" else {"rtol": 0.0, "atol": 0.0}
    check(node, feeds, opset, **exact)
    check.ort(node, feeds, opset)
    node = helper.make_node(op, ["x"], ["y"], noop_with_empty_axes=0)
    check(node, [x], opset)


@pytest.mark.parametrize(
    "op,dtype",
    [
        ("ReduceSum", np.int32),
        ("ReduceSum", np.float16),
        ("ReduceMean", np.float16),
        ("ReduceMax", np.int8),
        ("ReduceMin", np.uint8),
        ("ReduceProd", np.int64),
        ("ReduceSumSquare", np.int32),
        ("ReduceL1", np.int64),
        ("ReduceMax", np.bool_),
        ("ReduceMin", np.bool_),
        ("ReduceLogSumExp", np.float16),
    ],
)
def test_reduce_dtypes(op: str, dtype: type, rng: np.random.Generator, check: Any) -> None:
    x = rng.random((4, 6)) < 0.5 if dtype is np.bool_ else _reduce_input(rng, op, dtype, (4, 6))
    opset = 13 if op == "ReduceSum" else 20
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    # onnx.reference promotes ReduceSumSquare of int32 to int64; ONNX keeps T, as ORT does
    (check.ort if op == "ReduceSumSquare" else check)(
        node, [x, np.array([1], np.int64)], opset, rtol=2e-3 if dtype == np.float16 else 1e-6
    )


@pytest.mark.parametrize("op", REDUCE)
def test_reduce_empty_set(op: str) -> None:
    x = np.zeros((3, 0, 2), np.float32)
    opset = 13 if op == "ReduceSum" else 18
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
    got = run_own_kernel(node, [x, np.array([1], np.int64)], opset)[0]
    identity = {
        "ReduceMax": -np.inf,
        "ReduceMin": np.inf,
        "ReduceProd": 1.0,
        "ReduceLogSum": -np.inf,
        "ReduceLogSumExp": -np.inf,
    }.get(op, 0.0)
    assert got.dtype == np.float32 and got.shape == (3, 2)
    # the spec's empty-set identities (ReduceMean of nothing is 0/0 = NaN)
    if op == "ReduceMean":
        assert np.isnan(got).all()
    else:
        np.testing.assert_array_equal(got, np.full((3, 2), identity, np.float32))


def test_reduce_max_empty_int_uses_dtype_minimum() -> None:
    x = np.zeros((0, 3), np.int32)
    node = helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=0)
    got = run_own_kernel(node, [x, np.array([0], np.int64)], 20)[0]
    np.testing.assert_array_equal(got, np.full((3,), np.iinfo(np.int32).min, np.int32))


def test_reduce_logsumexp_stable() -> None:
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf], [-1000.0, 3.0]], np.float32)
    node = helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)
    got = run_own_kernel(node, [x, np.array([1], np.int64)], 18)[0]
    np.testing.assert_allclose(got, [1000.0 + np.log(2.0), -np.inf, 3.0], rtol=1e-6)


# --------------------------------------------------------------------------------------------
# ArgMax / ArgMin


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_ties(
    op: str, axis: int, keepdims: int, last: int, rng: np.random.Generator, check: Any
) -> None:
    x = rng.integers(0, 3, (4, 5, 3)).astype(np.float32)  # many ties
    node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)
    check(node, [x], 13)


# --------------------------------------------------------------------------------------------
# Softmax family


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_family(
    op: str, axis: int | None, opset: int, rng: np.random.Generator, check: Any
) -> None:
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    if op == "Hardmax":
        x = np.round(x)  # ties: the first maximum wins
    kw = {} if axis is None else {"axis": axis}
    node = helper.make_node(op, ["x"], ["y"], **kw)
    # onnx.reference does not flatten to 2-D before opset 13, so check those with onnxruntime
    (check.ort if opset < 13 else check)(node, [x], opset)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_softmax_dtypes_and_extremes(dtype: type, rng: np.random.Generator, check: Any) -> None:
    x = rng.standard_normal((3, 6)).astype(dtype)
    x[0, 0] = 1000 if dtype == np.float64 else 60000
    x[1, :] = -np.inf
    x[1, 2] = 0
    rtol = 2e-3 if dtype == np.float16 else 1e-7
    check(helper.make_node("Softmax", ["x"], ["y"]), [x], 13, rtol=rtol)
    # onnx.reference takes log(softmax), which underflows to -inf; ORT keeps x - max - log(sum)
    check.ort(helper.make_node("LogSoftmax", ["x"], ["y"]), [x], 13, rtol=rtol)


# --------------------------------------------------------------------------------------------
# CumSum / TopK


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64])
def test_cumsum(
    exclusive: int, reverse: int, axis: int, dtype: type, rng: np.random.Generator, check: Any
) -> None:
    x = (rng.standard_normal((3, 4, 2)) * 5).astype(dtype)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    check(node, [x, np.array(axis, np.int32)], 14)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("k", [0, 1, 3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_topk_ties_by_index(
    largest: int, axis: int, k: int, dtype: type, rng: np.random.Generator, check: Any
) -> None:
    x = rng.integers(0, 4, (5, 6, 7)).astype(dtype)  # many ties
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    check.ort(node, [x, np.array([k], np.int64)], 11)


def test_topk_k_attribute_opset1(rng: np.random.Generator, check: Any) -> None:
    x = rng.standard_normal((3, 8)).astype(np.float32)
    check(helper.make_node("TopK", ["x"], ["v", "i"], k=3), [x], 1)


# --------------------------------------------------------------------------------------------
# errors


def test_reduce_axis_out_of_range() -> None:
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"])
    with pytest.raises(InvalidArgument, match="out of range"):
        run_own_kernel(node, [np.ones((2, 3), np.float32), np.array([2], np.int64)], 13)
    with pytest.raises(InvalidArgument, match="duplicates"):
        run_own_kernel(node, [np.ones((2, 3), np.float32), np.array([1, -1], np.int64)], 13)


def test_topk_k_too_large() -> None:
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"])
    with pytest.raises(InvalidArgument, match="k=5"):
        run_own_kernel(node, [np.ones((2, 4), np.float32), np.array([5], np.int64)], 11)


def test_argmax_empty_axis_and_bad_axis() -> None:
    with pytest.raises(InvalidArgument, match="empty"):
        run_own_kernel(
            helper.make_node("ArgMax", ["x"], ["y"], axis=1), [np.ones((2, 0), np.float32)], 13
        )
    with pytest.raises(InvalidArgument, match="out of range"):
        run_own_kernel(
            helper.make_node("ArgMin", ["x"], ["y"], axis=3), [np.ones((2, 2), np.float32)], 13
        )


def test_softmax_axis_out_of_range() -> None:
    for opset in (11, 13):
        with pytest.raises(InvalidArgument, match="out of range"):
            run_own_kernel(
                helper.make_node("Softmax", ["x"], ["y"], axis=4),
                [np.ones((2, 2), np.float32)],
                opset,
            )


def test_cumsum_axis_checked() -> None:
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    with pytest.raises(InvalidArgument):
        run_own_kernel(node, [np.ones((2, 2), np.float32), np.array(2, np.int64)], 14)
