"""Gemm, MatMul, MatMulInteger, QLinearMatMul, Einsum, Det: official cases, references, errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    check_official_case,
    iter_node_cases,
    run_onnxruntime,
    run_own_kernel,
    run_reference,
)

OPS = {"Gemm", "MatMul", "MatMulInteger", "QLinearMatMul", "Einsum", "Det"}
CASES = list(iter_node_cases(OPS))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official(case):
    check_official_case(case)


def _rand(rng, shape, dtype):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 10, shape).astype(dtype)
    return rng.normal(0, 1, shape).astype(dtype)


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint64]
)
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_against_reference(dtype, trans_a, trans_b, rng, check):
    m, k, n = 3, 4, 5
    a = _rand(rng, (k, m) if trans_a else (m, k), dtype)
    b = _rand(rng, (n, k) if trans_b else (k, n), dtype)
    tol = 3e-3 if dtype == np.float16 else 1e-5
    for c_shape in [None, (), (1,), (n,), (m, 1), (1, n), (m, n)]:
        for alpha, beta in [(1.0, 1.0), (0.5, 2.0), (2.0, 0.0)]:
            ins = [a, b] if c_shape is None else [a, b, _rand(rng, c_shape, dtype)]
            node = helper.make_node(
                "Gemm",
                ["a", "b", "c"][: len(ins)],
                ["y"],
                alpha=alpha,
                beta=beta,
                transA=trans_a,
                transB=trans_b,
            )
            check(node, ins, 13, rtol=tol, atol=tol)


def test_gemm_opset6_broadcast_flag(rng, check):
    a, b = _rand(rng, (3, 4), np.float32), _rand(rng, (4, 5), np.float32)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], broadcast=1)
    ins = [a, b, _rand(rng, (5,), np.float32)]
    check(node, ins, 6)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"])
    with pytest.raises(InvalidArgument, match="does not broadcast"):
        run_own_kernel(node, ins, 6)


SHAPES = [
    ((4,), (4,)),
    ((4,), (4, 3)),
    ((2, 4), (4,)),
    ((2, 3, 4), (4, 5)),
    ((5, 1, 2, 4), (3, 4, 2)),
    ((3, 4), (2, 1, 4, 6)),
]


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint32]
)
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_matmul_against_reference(dtype, sa, sb, rng, check):
    a, b = _rand(rng, sa, dtype), _rand(rng, sb, dtype)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    tol = 3e-3 if dtype == np.float16 else 1e-5
    check(node, [a, b], 13, rtol=tol, atol=tol)


def test_matmul_bfloat16_rounds_a_float32_product(rng):
    a, b = _rand(rng, (3, 8), ml_dtypes.bfloat16), _rand(rng, (8, 2), ml_dtypes.bfloat16)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    got = run_own_kernel(node, [a, b], 13)[0]
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
@pytest.mark.parametrize("zp_kind", ["none", "scalar", "per_row_col"])
def test_matmul_integer_against_reference(ta, tb, zp_kind, rng):
    """Against onnx.reference: onnxruntime rejects per-row zero points and its AVX2 u8s8 path
    saturates intermediate int16 sums, so it is not a reference here."""
    a = rng.integers(np.iinfo(ta).min, np.iinfo(ta).max, (2, 3, 6)).astype(ta)
    b = rng.integers(np.iinfo(tb).min, np.iinfo(tb).max, (6, 5)).astype(tb)
    if zp_kind == "none":
        ins, names = [a, b], ["a", "b"]
        ref_ins = ins
    else:
        shape_a, shape_b = ((), ()) if zp_kind == "scalar" else ((3,), (5,))
        za = rng.integers(0, 20, shape_a).astype(ta)
        zb = rng.integers(0, 20, shape_b).astype(tb)
        ins, names = [a, b, za, zb], ["a", "b", "za", "zb"]
        # the reference subtracts a's zero point along the last axis; give it the row column
        ref_ins = [a, b, za.reshape(-1, 1) if za.ndim else za, zb]
    node = helper.make_node("MatMulInteger", names, ["y"])
    got = run_own_kernel(node, ins, 10)[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, run_reference(node, ref_ins, 10)[0])


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("k", [257, 258, 259, 513, 514, 515, 2000])
def test_matmul_integer_is_exact_over_long_inner_dimensions(ta, tb, zero_points, k):
    """Products of the extreme codes (every partial sum as large as it can be) across the runs
    of K computed in float32 (258 rows with zero points, 514 with int8 and none): the exact
    int32 sum, also in a batched and a 1-D A."""
    lo_a, hi_a = np.iinfo(ta).min, np.iinfo(ta).max
    lo_b, hi_b = np.iinfo(tb).min, np.iinfo(tb).max
    a = np.array([[hi_a] * k, [lo_a] * k, [hi_a, lo_a] * (k // 2) + [hi_a] * (k % 2)], ta)
    b = np.stack([np.full(k, hi_b), np.full(k, lo_b), np.resize([lo_b, hi_b], k)], axis=1)
    b = b.astype(tb)
    za = np.array(lo_a if zero_points else 0, ta)
    zb = np.array(hi_b if zero_points else 0, tb)
    want = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    got = run_own_kernel(node, [a, b, za, zb], 10)[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    batched = run_own_kernel(node, [np.stack([a, a[::-1]]), b, za, zb], 10)[0]
    np.testing.assert_array_equal(batched, np.stack([want, want[::-1]]))
    np.testing.assert_array_equal(run_own_kernel(node, [a[0], b, za, zb], 10)[0], want[0])


def test_matmul_integer_refuses_a_longer_b_than_a() -> None:
    """B with more rows than A has columns fails, also where K is computed in runs."""
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    a = np.ones((2, 300), np.uint8)
    with pytest.raises(InvalidArgument, match="cannot multiply"):
        run_own_kernel(node, [a, np.ones((600, 3), np.uint8)], 10)


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul_against_onnxruntime(qtype, per_column, rng):
    info = np.iinfo(qtype)
    a = rng.integers(info.min, info.max, (2, 4, 8)).astype(qtype)
    b = rng.integers(info.min, info.max, (8, 3)).astype(qtype)
    bs = rng.uniform(0.01, 0.05, (3,) if per_column else ()).astype(np.float32)
    bz = rng.integers(0, 10, (3,) if per_column else ()).astype(qtype)
    ins = [a, np.float32(0.03), qtype(3), b, bs, bz, np.float32(0.2), qtype(5)]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    got = run_own_kernel(node, ins, 21)[0]
    want = run_onnxruntime(node, ins, 21)[0]
    assert got.dtype == want.dtype
    # onnxruntime requantizes in float32; allow one step where a value sits on a rounding tie
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    assert (got == want).mean() > 0.95


EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ijk->", [(2, 3, 4)]),
    ("ij, jk, kl -> il", [(2, 3), (3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("eq,shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_against_reference(eq, shapes, dtype, rng, check):
    ins = [_rand(rng, s, dtype) for s in shapes]
    node = helper.make_node("Einsum", [f"x{i}" for i in range(len(ins))], ["y"], equation=eq)
    check(node, ins, 12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 2, 2), (1, 1)])
def test_det_against_reference(dtype, shape, rng, check):
    x = _rand(rng, shape, dtype)
    node = helper.make_node("Det", ["x"], ["y"])
    check(node, [x], 22, rtol=1e-4, atol=1e-5)


def test_errors():
    mm = helper.make_node("MatMul", ["a", "b"], ["y"])
    with pytest.raises(InvalidArgument, match="cannot multiply"):
        run_own_kernel(mm, [np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)], 13)
    gemm = helper.make_node("Gemm", ["a", "b", "c"], ["y"])
    with pytest.raises(InvalidArgument, match="inner dimensions"):
        run_own_kernel(gemm, [np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)], 13)
    with pytest.raises(InvalidArgument, match="does not broadcast"):
        ins = [np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.ones((3,), np.float32)]
        run_own_kernel(gemm, ins, 13)
    det = helper.make_node("Det", ["x"], ["y"])
    with pytest.raises(InvalidArgument, match="square"):
        run_own_kernel(det, [np.ones((2, 3), np.float32)], 22)
    es = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")
    with pytest.raises(InvalidArgument, match="einsum"):
        run_own_kernel(es, [np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)], 12)
