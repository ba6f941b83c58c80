"""turnout's own Gather/Scatter kernels against the ONNX node tests and onnx.reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from turnout.tools.testing import check_official_case, iter_node_cases, run_own_kernel

OPS = {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}
# test_scatter_with_axis / test_scatter_without_axis are included: onnx.reference has no Scatter,
# so these official cases are the only check of the deprecated op.
CASES = list(iter_node_cases(OPS))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_node_case(case: Any) -> None:
    check_official_case(case)


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather(axis: int, idx_dtype: Any, rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    n = x.shape[axis]
    check(node("Gather", ["x", "i"], axis=axis), [x, rng.integers(-n, n, (2, 3)).astype(idx_dtype)])
    check(node("Gather", ["x", "i"], axis=axis), [x, np.array(n - 1, idx_dtype)])
    check(node("Gather", ["x", "i"], axis=axis), [x, np.zeros((0, 2), idx_dtype)])


def test_gather_strings(node: Any, check: Any) -> None:
    x = np.array(["a", "b", "c"], dtype=object)
    check(node("Gather", ["x", "i"]), [x, np.array([[2, -3]], np.int64)])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_smaller_indices(
    axis: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    """indices may be smaller than data off the axis: onnxruntime allows it, the reference not."""
    x = rng.standard_normal((4, 5, 3)).astype(np.float64)
    n = x.shape[axis]
    idx = rng.integers(-n, n, (3, 2, 3))
    check.ort(node("GatherElements", ["x", "i"], axis=axis), [x, idx])
    a = axis % 3  # the reference mishandles a negative axis here
    full = rng.integers(-n, n, (*x.shape[:a], 2, *x.shape[a + 1 :]))
    check(node("GatherElements", ["x", "i"], axis=a), [x, full])
    check.ort(node("GatherElements", ["x", "i"], axis=axis), [x, full])


@pytest.mark.parametrize("batch_dims,k", [(0, 1), (0, 3), (1, 1), (1, 2), (2, 1)])
def test_gather_nd(
    batch_dims: int, k: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    dims = np.array(x.shape[batch_dims : batch_dims + k])
    shape = (*x.shape[:batch_dims], 3, k)
    idx = (rng.integers(0, 100, shape) % dims) - dims * rng.integers(0, 2, shape)
    check(node("GatherND", ["x", "i"], batch_dims=batch_dims), [x, idx.astype(np.int64)])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements(
    reduction: str, axis: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = rng.standard_normal((4, 5)).astype(np.float32)
    n = x.shape[axis]
    if reduction == "none":  # unique indices: duplicates are unspecified without a reduction
        idx = np.stack([rng.permutation(n)[:3] for _ in range(3)])  # rows hold no repeats
        idx = idx.T if axis == 0 else idx
    else:
        idx = rng.integers(-n, n, (3, 3))
    upd = rng.standard_normal(idx.shape).astype(np.float32)
    n_ = node("ScatterElements", ["x", "i", "u"], axis=axis, reduction=reduction)
    check(n_, [x, idx.astype(np.int64), upd], 18)


def test_scatter_elements_opset11_and_13(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.integers(0, 9, (3, 3)).astype(np.int32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = rng.integers(0, 9, (2, 3)).astype(np.int32)
    for opset in (11, 13, 16):
        check(node("ScatterElements", ["x", "i", "u"]), [x, idx, upd], opset)
    check(node("ScatterElements", ["x", "i", "u"], reduction="add"), [x, idx, upd], 16)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction: str, rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((4, 3, 2)).astype(np.float32)
    if reduction == "none":
        idx = np.array([[3, 0], [-4, 2], [1, -1]], np.int64)
    else:
        idx = rng.integers(-3, 3, (2, 2, 2)).astype(np.int64)
    upd = rng.standard_normal(idx.shape[:-1] + x.shape[2:]).astype(np.float32)
    check(node("ScatterND", ["x", "i", "u"], reduction=reduction), [x, idx, upd], 18)


def test_scatter_does_not_mutate_input(node: Any, check: Any) -> None:
    x = np.zeros((3, 3), np.float32)
    x.setflags(write=False)
    idx = np.array([[1]], np.int64)
    upd = np.ones((1, 1), np.float32)
    (y,) = check(node("ScatterElements", ["x", "i", "u"], reduction="add"), [x, idx, upd], 18)
    assert not x.any() and y.sum() == 1
    run_own_kernel(node("ScatterND", ["x", "i", "u"]), [x, idx, np.ones((1, 3), np.float32)])
    assert not x.any()


BAD_INDICES = [  # (op, input names, node() keywords, inputs)
    ("Gather", ["x", "i"], {}, [np.zeros((3, 2)), np.array([3], np.int64)]),
    ("Gather", ["x", "i"], {"axis": 1}, [np.zeros((3, 2)), np.array([-3], np.int64)]),
    ("Gather", ["x", "i"], {"axis": 2}, [np.zeros((3, 2)), np.array([0], np.int64)]),
    ("GatherElements", ["x", "i"], {}, [np.zeros((3, 2)), np.array([[5]], np.int64)]),
    ("GatherElements", ["x", "i"], {}, [np.zeros((3, 2)), np.zeros((1, 3), np.int64)]),
    ("GatherND", ["x", "i"], {}, [np.zeros((3, 2)), np.array([[1, 2]], np.int64)]),
    ("GatherND", ["x", "i"], {}, [np.zeros((3, 2)), np.zeros((1, 3), np.int64)]),
    (
        "ScatterElements",
        ["x", "i", "u"],
        {},
        [np.zeros((3, 2)), np.array([[-4]], np.int64), np.zeros((1, 1))],
    ),
    (
        "ScatterElements",
        ["x", "i", "u"],
        {},
        [np.zeros((3, 2)), np.array([[0]], np.int64), np.zeros((1, 2))],
    ),
    (
        "ScatterND",
        ["x", "i", "u"],
        {},
        [np.zeros((3, 2)), np.array([[3]], np.int64), np.zeros((1, 2))],
    ),
    (
        "ScatterND",
        ["x", "i", "u"],
        {},
        [np.zeros((3, 2)), np.array([[0]], np.int64), np.zeros((1, 3))],
    ),
]


@pytest.mark.parametrize("op,names,kw,inputs", BAD_INDICES, ids=[b[0] for b in BAD_INDICES])
def test_bad_indices_raise_invalid_argument(
    op: str, names: list[str], kw: dict[str, Any], inputs: list[Any], node: Any, check: Any
) -> None:
    check.rejects(node(op, names, **kw), inputs, 18)
