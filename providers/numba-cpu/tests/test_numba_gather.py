"""numba Gather and GatherElements against onnx.reference: random ranks, axes, dtypes, negative
and scalar indices, empty tensors, the embedding lookups of text models, and out-of-range
indices, which must raise an error naming the node before anything is read.

test_numba_provider.py::test_gather_bad_index_names_the_node covers float16 data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import cpu_session, provider_session
from turnout_numba.kernels import gather as gather_kernels

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint16, np.int32, np.int64, np.bool_]


def _model(op: str, data: np.ndarray, idx: np.ndarray, axis: int, known: bool = True) -> Any:
    """A one-node model; `known=False` declares no input shapes."""
    elem = helper.np_dtype_to_tensor_dtype
    node = helper.make_node(op, ["data", "idx"], ["y"], axis=axis, name=f"my_{op.lower()}")
    shape = (lambda a: list(a.shape)) if known else (lambda a: None)
    g = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("data", elem(data.dtype), shape(data)),
            helper.make_tensor_value_info("idx", elem(idx.dtype), shape(idx)),
        ],
        [helper.make_tensor_value_info("y", elem(data.dtype), None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _check(
    model: onnx.ModelProto,
    data: np.ndarray,
    idx: np.ndarray,
    threads: int = 1,
    reference: onnx.ModelProto | None = None,
) -> None:
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    feeds = {"data": data, "idx": idx}
    (got,) = sess.run(None, feeds)
    (want,) = ReferenceEvaluator(reference or model).run(None, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return (rng.standard_normal(shape) * 50).astype(dtype)


@pytest.fixture(params=["take", "compiled"])
def gather_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Small Gathers over leading axes run numpy's take: `compiled` turns that off, so the
    compiled loop meets the same cases."""
    if request.param == "compiled":
        monkeypatch.setattr(gather_kernels, "TAKE_MAX", -1)
    return str(request.param)


@pytest.mark.parametrize("seed", range(30))
def test_gather_random(seed: int, gather_path: str) -> None:
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 5))
    shape = tuple(int(v) for v in rng.integers(1, 6, rank))
    axis = int(rng.integers(-rank, rank))
    n = shape[axis]
    idx_shape = tuple(int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3))))
    idx = rng.integers(-n, n, idx_shape).astype(rng.choice([np.int32, np.int64]))
    data = _data(rng, shape, DTYPES[seed % len(DTYPES)])
    _check(_model("Gather", data, idx, axis), data, idx, threads=1 if seed % 2 else 0)


@pytest.mark.parametrize("seed", range(20))
def test_gather_elements_random(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    shape = tuple(int(v) for v in rng.integers(1, 6, rank))
    axis = int(rng.integers(-rank, rank))
    n = shape[axis]
    idx_shape = tuple(int(rng.integers(1, 6)) if d == axis % rank else s
                      for d, s in enumerate(shape))  # fmt: skip
    idx = rng.integers(-n, n, idx_shape).astype(rng.choice([np.int32, np.int64]))
    data = _data(rng, shape, DTYPES[seed % len(DTYPES)])
    # (onnx.reference's GatherElements mishandles a negative axis: it gets the positive one)
    ref = _model("GatherElements", data, idx, axis % rank)
    _check(_model("GatherElements", data, idx, axis), data, idx, 1 if seed % 2 else 0, ref)


def test_gather_elements_indices_smaller_than_data(rng: np.random.Generator) -> None:
    """The index extent may be smaller than the data's on the other axes (onnx.reference does
    not take that; the CPU kernel and onnxruntime do)."""
    data = _data(rng, (4, 5, 3), np.float32)
    idx = rng.integers(-5, 5, (2, 7, 2)).astype(np.int64)
    model = _model("GatherElements", data, idx, 1)
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=1)
    feeds = {"data": data, "idx": idx}
    (got,) = sess.run(None, feeds)
    np.testing.assert_array_equal(got, cpu_session(model).run(None, feeds)[0])
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("vocab", "dim", "idx_shape"),
    [(1000, 64, ()), (1000, 64, (1, 16)), (30000, 128, (1, 128)), (50, 16, (4, 4))],
)
def test_embedding_lookups(
    rng: np.random.Generator, vocab: int, dim: int, idx_shape: tuple[int, ...], gather_path: str
) -> None:
    """Text classifiers: token ids (or one scalar id) into an embedding table."""
    table = rng.standard_normal((vocab, dim)).astype(np.float32)
    idx = rng.integers(-vocab, vocab, idx_shape).astype(np.int64)
    _check(_model("Gather", table, idx, 0), table, idx)


def test_large_gather_runs_the_parallel_variant(rng: np.random.Generator) -> None:
    table = rng.standard_normal((64, 5000)).astype(np.float32)
    idx = rng.integers(-5000, 5000, (40,)).astype(np.int64)
    _check(_model("Gather", table, idx, 1), table, idx, threads=2)


@pytest.mark.parametrize("op", ["Gather", "GatherElements"])
def test_empty_tensors(op: str) -> None:
    data = np.zeros((0, 3), np.float32)
    idx = np.zeros((0, 3) if op == "GatherElements" else (0,), np.int64)
    _check(_model(op, data, idx, 0), data, idx)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    idx = np.zeros((2, 0), np.int64)
    _check(_model(op, data, idx, 1), data, idx)


@pytest.mark.parametrize("op", ["Gather", "GatherElements"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_out_of_range_names_the_node_and_value(op: str, dtype: Any) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    good = np.array([[0, -1], [3, 2], [1, -4]], dtype)
    sess = provider_session(_model(op, data, good, 1, known=False), "NumbaExecutionProvider")
    sess.run(None, {"data": data, "idx": good})
    for bad in (4, -5, np.iinfo(dtype).max, np.iinfo(dtype).min):
        idx = good.copy()
        idx[2, 1] = bad
        with pytest.raises(InvalidArgument, match=rf"my_{op.lower()}: index {bad} out of range"):
            sess.run(None, {"data": data, "idx": idx})
    with pytest.raises(InvalidArgument, match="my_"):  # any index into an empty axis
        sess.run(None, {"data": np.zeros((3, 0), np.float32), "idx": good})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_leading_axis_out_of_range_names_the_node(dtype: Any, gather_path: str) -> None:
    """The take path (axis 0, scalar and 2-D indices) raises the compiled path's error."""
    state = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for good in (np.array(-2, dtype), np.array([[1, 0], [-1, 1]], dtype)):
        sess = provider_session(_model("Gather", state, good, 0, known=False),
                                "NumbaExecutionProvider")  # fmt: skip
        (got,) = sess.run(None, {"data": state, "idx": good})
        np.testing.assert_array_equal(got, np.take(state, good, axis=0))
        assert got.shape == (*good.shape, 3, 4) and got.flags.writeable
        for bad in (2, -3, np.iinfo(dtype).max, np.iinfo(dtype).min):
            idx = good.copy()
            idx[(-1,) * idx.ndim] = bad
            with pytest.raises(InvalidArgument, match=rf"my_gather: index {bad} out of range"):
                sess.run(None, {"data": state, "idx": idx})
    (got,) = sess.run(None, {"data": np.arange(3.0, dtype=np.float32), "idx": np.array(1, dtype)})
    assert type(got) is np.ndarray and got.shape == () and got == 1.0  # 0-d, not a scalar


def test_gather_into_empty_data_with_no_indices_is_empty() -> None:
    data = np.zeros((2, 0), np.float32)
    idx = np.zeros((0,), np.int64)
    _check(_model("Gather", data, idx, 1), data, idx)


def test_strings_and_unknown_types_stay_with_numpy() -> None:
    data = np.array(["a", "b"], dtype=object)
    node = helper.make_node("Gather", ["data", "idx"], ["y"])
    g = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("data", TensorProto.STRING, [2]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.STRING, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    sess = provider_session(model, "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numpy"]
    (y,) = sess.run(None, {"data": data, "idx": np.array([1], np.int64)})
    assert y.tolist() == ["b"]
