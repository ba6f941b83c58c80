"""com.microsoft SparseToDenseMatMul on turnout and onnxruntime: A sparse (COO coordinates or
CSR), B dense, `transA`/`transB`, `alpha`, every element type onnxruntime's CPU kernel takes,
fed as onnxruntime's own test feeds them (`OrtValue.ort_value_from_sparse_tensor`, then
`run_with_ort_values`); and the errors its kernel raises, with its classes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout

ELEMS = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.int64: TensorProto.INT64,
    np.int32: TensorProto.INT32,
    np.uint64: TensorProto.UINT64,
    np.uint32: TensorProto.UINT32,
}


def _ort() -> Any:
    return pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")


def _model(elem: int, b_elem: int | None = None, **attrs: Any) -> bytes:
    """onnxruntime's sparse_to_dense_matmul.onnx, with unknown dims and the given attributes."""
    a = onnx.ValueInfoProto(name="sparse_A")
    a.type.sparse_tensor_type.elem_type = elem
    for _ in range(2):
        a.type.sparse_tensor_type.shape.dim.add()
    b = helper.make_tensor_value_info("dense_B", b_elem or elem, [None, None])
    y = helper.make_tensor_value_info("dense_Y", b_elem or elem, [None, None])
    node = helper.make_node(
        "SparseToDenseMatMul",
        ["sparse_A", "dense_B"],
        ["dense_Y"],
        "SpMM",
        domain="com.microsoft",
        **attrs,
    )
    graph = helper.make_graph([node], "SpMM", [a, b], [y])
    ms = helper.make_opsetid("com.microsoft", 1)
    return helper.make_model(graph, opset_imports=[ms]).SerializeToString()


def _coo(rt: Any, a: np.ndarray, order: np.ndarray) -> Any:
    r, c = np.nonzero(a)
    r, c = r[order], c[order]
    idx = np.stack([r, c], 1).astype(np.int64)
    return rt.SparseTensor.sparse_coo_from_numpy(
        list(a.shape), a[r, c], idx, rt.OrtDevice.make("cpu", 0)
    )


def _csr(rt: Any, a: np.ndarray, order: np.ndarray) -> Any:
    r, c = np.nonzero(a)
    outer = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=a.shape[0]))])
    cpu = rt.OrtDevice.make("cpu", 0)
    return rt.SparseTensor.sparse_csr_from_numpy(
        list(a.shape), a[r, c], c.astype(np.int64), outer.astype(np.int64), cpu
    )


def _run(rt: Any, model: bytes, sparse: Any, b: np.ndarray) -> Any:
    sess = rt.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = {
        "sparse_A": rt.OrtValue.ort_value_from_sparse_tensor(sparse),
        "dense_B": rt.OrtValue.ortvalue_from_numpy(b),
    }
    (y,) = sess.run_with_ort_values(["dense_Y"], feeds)
    return y


@pytest.mark.parametrize(
    "trans", [(0, 0), (0, 1), (1, 0), (1, 1)], ids=lambda t: f"tA{t[0]}tB{t[1]}"
)
@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("dtype", list(ELEMS), ids=lambda d: np.dtype(d).name)
def test_sparse_to_dense_matmul_matches_onnxruntime(
    dtype: Any, layout: str, trans: tuple[int, int]
) -> None:
    ort = _ort()
    rng = np.random.default_rng(7)
    ta, tb = trans
    a = ((rng.random((6, 7)) < 0.4) * rng.integers(1, 9, (6, 7))).astype(dtype)
    if a.dtype.kind == "f":
        a *= rng.random((6, 7)).astype(dtype)
    b = (rng.random((6 if ta else 7, 5)) * 10).astype(dtype)
    b = b.T.copy() if tb else b
    order = rng.permutation(np.count_nonzero(a))  # COO entries in any order
    model = _model(ELEMS[dtype], transA=ta, transB=tb, alpha=1.7)
    make = _coo if layout == "coo" else _csr
    want = _run(ort, model, make(ort, a, order), b)
    got = _run(turnout, model, make(turnout, a, order), b)
    assert got.is_tensor() and got.data_type() == want.data_type()
    assert got.shape() == want.shape()
    if layout == "csr" and a.dtype.kind == "f" and tb:
        # Eigen sums a row-major A times a transposed B in its own order: last-bit differences
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    else:  # alpha scales float only; COO sums in A's order, as onnxruntime's loop
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert got.numpy().dtype == want.numpy().dtype


def test_onnxruntimes_spmm_case() -> None:
    """onnxruntime's own test shape: a 9x9 COO matrix of 53 entries times a dense 9x9."""
    ort = _ort()
    rng = np.random.default_rng(3)
    a = np.zeros((9, 9), np.float32)
    flat = rng.choice(81, 53, replace=False)
    a.reshape(-1)[np.sort(flat)] = np.arange(1, 54, dtype=np.float32)
    b = rng.integers(0, 54, (9, 9)).astype(np.float32)
    order = np.arange(53)
    model = _model(TensorProto.FLOAT)
    got = _run(turnout, model, _coo(turnout, a, order), b)
    np.testing.assert_array_equal(got.numpy(), _run(ort, model, _coo(ort, a, order), b).numpy())
    np.testing.assert_array_equal(got.numpy(), a @ b)


def _errors(rt: Any) -> dict[str, Any]:
    cpu = rt.OrtDevice.make("cpu", 0)
    one = np.ones(1, np.float32)
    coo = rt.SparseTensor.sparse_coo_from_numpy
    b32 = np.ones((3, 2), np.float32)
    return {
        "linear indices": (_model(1), coo([2, 3], one, np.array([4]), cpu), b32),
        "inner dimensions": (
            _model(1),
            coo([2, 3], one, np.array([[0, 0]]), cpu),
            np.ones((4, 2), np.float32),
        ),
        "element types": (
            _model(1, 11),
            coo([2, 3], one, np.array([[0, 0]]), cpu),
            np.ones((3, 2)),
        ),
    }


@pytest.mark.parametrize("case", ["linear indices", "inner dimensions", "element types"])
def test_sparse_to_dense_matmul_errors_as_onnxruntime(case: str) -> None:
    ort = _ort()
    model, sparse, b = _errors(ort)[case]
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail):
        _run(ort, model, sparse, b)
    model, sparse, b = _errors(turnout)[case]
    with pytest.raises(turnout.Fail, match="SpMM"):
        _run(turnout, model, sparse, b)
