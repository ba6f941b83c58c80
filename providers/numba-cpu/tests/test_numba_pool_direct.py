"""numba MaxPool/AveragePool by rows and flat (kernels/pool_rows.py): the windows clamped at
every border with no padded copy. Odd sizes, pads, ceil_mode, strides 1/2/3, kernels 2/3/5,
dilations, 1-D, against onnx.reference (float64) and turnout's numpy kernel; NaN and -inf
against the numpy kernel value for value (turnout's NaN rule)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.tools.testing import cpu_session, one_node_model, provider_session, run_reference


def _run(node: Any, x: np.ndarray, opset: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    model = one_node_model(node, [x], opset)
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    (got,) = sess.run(None, {"x": x})
    (want,) = cpu_session(model).run(None, {"x": x})
    assert got.shape == want.shape and got.dtype == want.dtype
    return got, want


def _k(k: int, nd: int = 2) -> list[int]:
    return [k] * nd


CASES: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
    # (what, x shape, attributes); the op runs both as MaxPool and AveragePool
    ("k3 s2 odd", (1, 5, 17, 15), {"kernel_shape": _k(3), "strides": _k(2)}),
    ("k3 s2 p1 even", (2, 3, 16, 14), {"kernel_shape": _k(3), "strides": _k(2), "pads": _k(1, 4)}),
    ("k2 s2 odd", (1, 4, 13, 11), {"kernel_shape": _k(2), "strides": _k(2)}),
    ("k2 s2 ceil", (1, 4, 13, 11), {"kernel_shape": _k(2), "strides": _k(2), "ceil_mode": 1}),
    ("k3 s2 ceil p1", (1, 3, 12, 9),
     {"kernel_shape": _k(3), "strides": _k(2), "ceil_mode": 1, "pads": [1, 1, 0, 0]}),
    ("k3 s3 p1", (1, 3, 14, 16), {"kernel_shape": _k(3), "strides": _k(3), "pads": _k(1, 4)}),
    ("k5 s3 p2", (1, 3, 19, 20), {"kernel_shape": _k(5), "strides": _k(3), "pads": _k(2, 4)}),
    ("k5 s1 p2 same", (1, 3, 11, 12), {"kernel_shape": _k(5), "pads": _k(2, 4)}),
    ("k5 s1 p(1, 3)", (1, 3, 9, 10), {"kernel_shape": _k(5), "pads": [1, 1, 3, 3]}),
    ("k3 s1 p1 same", (2, 4, 13, 13), {"kernel_shape": _k(3), "pads": _k(1, 4)}),
    ("k3 s1 p1 thin", (1, 3, 1, 2), {"kernel_shape": _k(3), "pads": _k(1, 4)}),
    ("k3 s1 p1 tall", (1, 3, 9, 1), {"kernel_shape": _k(3), "pads": _k(1, 4)}),
    ("k3 s1 p(2, 0)", (1, 3, 8, 9), {"kernel_shape": _k(3), "pads": [2, 2, 0, 0]}),
    ("k2 s1 SAME_UPPER", (1, 3, 7, 8), {"kernel_shape": _k(2), "auto_pad": "SAME_UPPER"}),
    ("k2 s1 SAME_LOWER", (1, 3, 7, 8), {"kernel_shape": _k(2), "auto_pad": "SAME_LOWER"}),
    ("k3 s1 valid", (1, 3, 7, 9), {"kernel_shape": _k(3)}),
    ("(3, 2) s(2, 1)", (1, 3, 11, 10), {"kernel_shape": [3, 2], "strides": [2, 1]}),
    ("(1, 3) s(1, 2)", (1, 3, 6, 11), {"kernel_shape": [1, 3], "strides": [1, 2]}),
    ("k3 s1 p1 dilated rows", (1, 3, 12, 10),
     {"kernel_shape": _k(3), "pads": [2, 1, 2, 1], "dilations": [2, 1]}),
    ("k3 s2 dilated", (1, 3, 15, 16),
     {"kernel_shape": _k(3), "strides": _k(2), "dilations": [2, 2], "pads": [1, 2, 2, 1]}),
    ("k4 s2 p3", (1, 3, 7, 7), {"kernel_shape": _k(4), "strides": _k(2), "pads": _k(3, 4)}),
    ("k7 s1 global-like", (1, 6, 7, 7), {"kernel_shape": _k(7)}),
    ("k7 p(0, 1) global-like", (2, 5, 6, 6), {"kernel_shape": _k(7), "pads": [0, 0, 1, 1]}),
    ("k7 p1 global-like, 6 wide", (1, 4, 7, 6), {"kernel_shape": _k(7), "pads": [1, 0, 0, 1]}),
    ("(5, 1) global rows", (1, 4, 5, 3), {"kernel_shape": [5, 1]}),
    ("1-D k3 s2 p1", (2, 3, 21), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("1-D k3 s1 p1", (2, 3, 21), {"kernel_shape": [3], "pads": [1, 1]}),
    ("1-D k5 s3 ceil", (1, 3, 22), {"kernel_shape": [5], "strides": [3], "ceil_mode": 1}),
    # output rows 32 or more wide: the rows kernels (pool_rows.plane_fits)
    ("wide k3 s2 p1", (1, 2, 9, 75), {"kernel_shape": _k(3), "strides": _k(2), "pads": _k(1, 4)}),
    ("wide k2 s2 ceil", (1, 2, 7, 81), {"kernel_shape": _k(2), "strides": _k(2), "ceil_mode": 1}),
    ("wide k5 s3 p2", (1, 2, 8, 110), {"kernel_shape": _k(5), "strides": _k(3), "pads": _k(2, 4)}),
    ("wide (3, 1) s(2, 1)", (1, 2, 9, 40), {"kernel_shape": [3, 1], "strides": [2, 1]}),
    ("wide k3 s1 p(1, 0)", (1, 2, 6, 70), {"kernel_shape": _k(3), "pads": [1, 0, 1, 0]}),
    ("wide k2 s1", (1, 2, 5, 66), {"kernel_shape": _k(2)}),
    ("wide k3 s2 dilated", (1, 2, 11, 90),
     {"kernel_shape": _k(3), "strides": _k(2), "dilations": [2, 3], "pads": [2, 1, 2, 1]}),
    ("wide 1-D k3 s2 p1", (2, 3, 90), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("wide k4 s2 p(0, 3)", (1, 2, 8, 80),
     {"kernel_shape": _k(4), "strides": _k(2), "pads": [0, 3, 0, 3]}),
]  # fmt: skip
# numpy kernel only: onnx.reference's ceil_mode divisor is not onnxruntime's (or turnout's),
# its output shape is wrong for pads [1, 1, 3, 3], [1, 0, 1, 0] or [2, 2, 0, 0] (it gives
# (6, 82) for an (8, 80) input at kernel 5 and pads [1, 1, 3, 3]), and its 1-D MaxPool with
# pads at stride 1 raises IndexError
NOT_REFERENCE = {
    "k2 s2 ceil", "k3 s2 ceil p1", "1-D k5 s3 ceil", "k5 s1 p(1, 3)", "k3 s1 p(2, 0)",
    "k3 s2 dilated", "1-D k3 s1 p1", "wide k2 s2 ceil", "wide k3 s1 p(1, 0)",
    "k7 p(0, 1) global-like", "k7 p1 global-like, 6 wide",
}  # fmt: skip


@pytest.mark.parametrize("what, shape, attrs", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("threads", [1, 2])
def test_pool_borders(what: str, shape: Any, attrs: dict[str, Any], op: str, threads: int) -> None:
    x = (np.random.default_rng(len(what)).standard_normal(shape) * 3).astype(np.float32)
    variants = [attrs]
    if op == "AveragePool" and ("pads" in attrs or "auto_pad" in attrs):
        variants.append({**attrs, "count_include_pad": 1})
    for a in variants:
        node = helper.make_node(op, ["x"], ["y"], **a)
        got, want = _run(node, x, 19, threads)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        if what not in NOT_REFERENCE:
            ref = run_reference(node, [x.astype(np.float64)], 19)[0]
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("what, shape, attrs", CASES, ids=[c[0] for c in CASES])
def test_max_pool_nan_and_inf_at_borders(what: str, shape: Any, attrs: dict[str, Any]) -> None:
    """NaN in corners, edges and the interior, -inf planes and +inf: the numpy kernel's
    values exactly (the NaN redo), and the NaN-free run equal to it too."""
    rng = np.random.default_rng(len(what) + 1)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(shape[0] * shape[1], -1)
    flat[0, :] = -np.inf
    flat[-1, rng.integers(0, flat.shape[1], 2)] = np.inf
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    got, want = _run(node, x, 12, 1)
    np.testing.assert_array_equal(got, want)
    for q in range(1, flat.shape[0]):
        flat[q, [0, flat.shape[1] - 1, int(rng.integers(0, flat.shape[1]))]] = np.nan
    got, want = _run(node, x, 12, 1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", [np.float64, np.int8, np.uint8])
@pytest.mark.parametrize(
    "what", ["k3 s2 p1 even", "k3 s1 p1 same", "k5 s1 p(1, 3)", "1-D k3 s1 p1", "wide k3 s2 p1"]
)
def test_max_pool_dtypes(dt: Any, what: str) -> None:
    _, shape, attrs = next(c for c in CASES if c[0] == what)
    rng = np.random.default_rng(7)
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(info.min, int(info.max) + 1, shape).astype(dt)
    else:
        x = rng.standard_normal(shape).astype(dt)
    got, want = _run(helper.make_node("MaxPool", ["x"], ["y"], **attrs), x, 12, 1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "what", ["k3 s2 p1 even", "k3 s1 p1 same", "k5 s1 p2 same", "wide k3 s2 p1"]
)
def test_average_pool_float64(what: str) -> None:
    _, shape, attrs = next(c for c in CASES if c[0] == what)
    x = np.random.default_rng(8).standard_normal(shape)
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs, count_include_pad=1)
    got, want = _run(node, x, 19, 1)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got, run_reference(node, [x], 19)[0], rtol=1e-12)
