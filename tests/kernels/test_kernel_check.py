"""The `check` fixture every kernel test relies on fails where it must: a check that passed
everything would turn every kernel test green."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

X = np.array([-1.0, 0.5, 2.0], np.float32)
RELU = np.maximum(X, 0)

WRONG = {  # what a reference answers, and the AssertionError it must cause
    "value": ([RELU + np.float32(1e-3)], "output 0"),
    "dtype": ([RELU.astype(np.float64)], "float32.*float64"),
    "shape": ([RELU.reshape(1, 3)], r"\[3\].*\[1, 3\]"),
    "count": ([RELU, RELU], "1 outputs, expected 2"),
}


@pytest.mark.parametrize("case", WRONG)
def test_check_fails_against_a_different_answer(case: str, check: Any, node: Any) -> None:
    answer, message = WRONG[case]
    different = type(check)(reference=lambda *_: answer)
    with pytest.raises(AssertionError, match=message):
        different(node("Relu", ["x"]), [X])


def test_check_passes_the_same_answer_and_returns_the_own_outputs(check: Any, node: Any) -> None:
    (y,) = type(check)(reference=lambda *_: [RELU.copy()])(node("Relu", ["x"]), [X])
    np.testing.assert_array_equal(y, RELU)


def test_check_compares_strings_exactly(check: Any, node: Any) -> None:
    s = np.array(["a", "b", "c"], dtype=object)
    same = type(check)(reference=lambda *_: [np.array(["a", "b", "c"])])  # numpy str is fine
    same(node("Identity", ["s"]), [s])
    different = type(check)(reference=lambda *_: [np.array(["a", "b", "C"])])
    with pytest.raises(AssertionError, match="output 0"):
        different(node("Identity", ["s"]), [s])


def test_check_refuses_a_numpy_scalar_for_a_tensor(
    check: Any, node: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conftest = sys.modules[type(check).__module__]
    monkeypatch.setattr(conftest, "run_own_kernel", lambda *_: [np.float32(1.5)])
    n = node("ReduceSum", ["x"], keepdims=0)
    one = type(check)(reference=lambda *_: [np.array(1.5, np.float32)])
    with pytest.raises(AssertionError, match="not an array"):
        one(n, [X], 11)
    type(check)(reference=one.reference, scalars_ok=True)(n, [X], 11)


@pytest.mark.kernel_check(rtol=0.5, atol=0.0)
def test_kernel_check_mark_sets_the_defaults(check: Any) -> None:
    assert (check.rtol, check.atol) == (0.5, 0.0)
    assert (check.ort.rtol, check.ort.atol) == (0.5, 0.0)


def test_rejects_wants_the_node_name_first(check: Any, node: Any) -> None:
    bad = node("Gather", ["x", "i"])
    check.rejects(bad, [np.zeros((3, 2)), np.array([3], np.int64)])
    with pytest.raises(pytest.fail.Exception):  # a valid input raises nothing
        check.rejects(bad, [np.zeros((3, 2)), np.array([1], np.int64)])
