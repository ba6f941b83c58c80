"""numba Gemm and MatMul against onnx.reference: the small-M shapes of batch-1 dense layers and
attention heads, transposes, alpha/beta, every C broadcast, weights as initializers (packed
once) and as inputs (which may change between runs), and the errors bad shapes raise.

FusedGemm is tested in test_numba_conv_gemm.py.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import provider_session

TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}


def _model(
    op: str, feeds: dict[str, np.ndarray], const: tuple[str, ...] = (), **attrs: Any
) -> onnx.ModelProto:
    """A one-node model; inputs named in `const` become initializers (read-only at run time)."""
    elem = helper.np_dtype_to_tensor_dtype
    names = list(feeds)
    node = helper.make_node(op, names, ["y"], name=f"my_{op.lower()}", **attrs)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, elem(v.dtype), list(v.shape))
         for n, v in feeds.items() if n not in const],
        [helper.make_tensor_value_info("y", elem(feeds[names[0]].dtype), None)],
        [numpy_helper.from_array(feeds[n], n) for n in const],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 1) -> np.ndarray:
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    live = {n: v for n, v in feeds.items() if n in {i.name for i in model.graph.input}}
    got = sess.run(None, live)[0]
    assert sess.run(None, live)[0].tobytes() == got.tobytes()  # packed weights: same result
    want = ReferenceEvaluator(model).run(None, live)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = TOL[got.dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    return got


@pytest.mark.parametrize("seed", range(40))
def test_gemm_random(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dt = np.float64 if seed % 4 == 0 else np.float32
    m = int(rng.choice([1, 1, 2, 3, 4, 5, 8, 16, 33, 64]))
    k, n = (int(v) for v in rng.integers(1, 70, 2))
    ta, tb = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    feeds = {
        "a": rng.standard_normal((k, m) if ta else (m, k)).astype(dt),
        "b": rng.standard_normal((n, k) if tb else (k, n)).astype(dt),
    }
    c_shape = [None, (), (1,), (n,), (1, n), (m, 1), (m, n)][seed % 7]
    if c_shape is not None:
        feeds["c"] = rng.standard_normal(c_shape).astype(dt)
    attrs: dict[str, Any] = {"transA": ta, "transB": tb}
    if rng.integers(0, 2):
        attrs["alpha"] = float(rng.uniform(0.5, 2))
        attrs["beta"] = float(rng.choice([0.0, 0.5, 1.5]))
    const = tuple(x for x in ("b", "c") if x in feeds and rng.integers(0, 2))
    _run(_model("Gemm", feeds, const, **attrs), feeds, threads=1 if seed % 3 else 0)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((1, 128), (128, 128)),  # a batch-1 dense layer
        ((1, 64, 256), (256, 256)),  # a token sequence through a projection
        ((1, 8, 384), (384, 384)),
        ((7,), (7, 5)),  # 1-D A
        ((3, 7), (7,)),  # 1-D B
        ((1, 4, 32, 16), (1, 4, 16, 32)),  # attention scores
        ((2, 1, 5, 6), (3, 6, 4)),  # batched, broadcast
        ((2, 3, 0), (0, 4)),
    ],
)
@pytest.mark.parametrize("const", [False, True])
def test_matmul_shapes(
    rng: np.random.Generator, a_shape: tuple[int, ...], b_shape: tuple[int, ...], const: bool
) -> None:
    feeds = {
        "a": rng.standard_normal(a_shape).astype(np.float32),
        "b": rng.standard_normal(b_shape).astype(np.float32),
    }
    _run(_model("MatMul", feeds, ("b",) if const else ()), feeds)


@pytest.mark.parametrize("m", [1, 16, 64])
def test_pytorch_linear_layer(rng: np.random.Generator, m: int) -> None:
    """Gemm(A, W, bias, transB=1) with W and bias initializers, as torch.onnx exports Linear."""
    feeds = {
        "a": rng.standard_normal((m, 256)).astype(np.float32),
        "w": rng.standard_normal((128, 256)).astype(np.float32),
        "bias": rng.standard_normal(128).astype(np.float32),
    }
    _run(_model("Gemm", feeds, ("w", "bias"), transB=1), feeds)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "k, n, with_c",
    [(544, 1000, True), (543, 1000, False), (130, 7, True), (2, 3000, True)],
    ids=["classifier", "odd K no bias", "narrow", "K of 2"],
)
def test_batch_one_gemv_blocks(
    rng: np.random.Generator, threads: int, k: int, n: int, with_c: bool
) -> None:
    """A batch-1 Gemm takes the compiled GEMV in blocks of columns (`GEMV_BLOCK`), on the
    workers at 2 threads when the weights are large: blocks not a multiple of the width, K
    not a multiple of its four-row steps, alpha and beta."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("numba has one thread on this machine")
    feeds = {
        "a": rng.standard_normal((1, k)).astype(np.float32),
        "w": rng.standard_normal((n, k)).astype(np.float32),
    }
    if with_c:
        feeds["bias"] = rng.standard_normal(n).astype(np.float32)
    model = _model("Gemm", feeds, tuple(f for f in feeds if f != "a"), transB=1, alpha=0.5,
                   beta=2.0)  # fmt: skip
    _run(model, feeds, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "rows, activation, dt",
    [(1, "", np.float32), (1, "Relu", np.float32), (1, "", np.float64), (3, "", np.float32)],
)
def test_large_weights_of_one_row_products_are_not_copied(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, threads: int, rows: int,
    activation: str, dt: type,
) -> None:  # fmt: skip
    """A transB weight of `KEEP_NT_BYTES` or more times a declared single row is a GEMV on the
    weight as given (`_gemv_rows`; the limit lowered here so that a small weight qualifies,
    700 rows: not a multiple of its blocks or of its four rows); more rows transpose it."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("numba has one thread on this machine")
    from turnout_numba.kernels import gemm

    monkeypatch.setattr(gemm, "KEEP_NT_BYTES", 4096)
    copies: list[tuple[int, ...]] = []
    real = gemm.transposed
    monkeypatch.setattr(gemm, "transposed", lambda w: copies.append(w.shape) or real(w))
    feeds = {
        "a": rng.standard_normal((rows, 300)).astype(dt),
        "w": rng.standard_normal((700, 300)).astype(dt),
        "bias": rng.standard_normal(700).astype(dt),
    }
    model = _model("Gemm", feeds, ("w", "bias"), transB=1, beta=0.5)
    if activation:
        node = model.graph.node[0]
        node.output[0] = "t"
        model.graph.node.append(helper.make_node(activation, ["t"], ["y"]))
    _run(model, feeds, threads)
    assert copies == ([] if rows == 1 else [(700, 300)])


def test_weights_fed_as_inputs_may_change_in_place(rng: np.random.Generator) -> None:
    feeds = {
        "a": rng.standard_normal((1, 6)).astype(np.float32),
        "b": rng.standard_normal((5, 6)).astype(np.float32),
        "c": rng.standard_normal(5).astype(np.float32),
    }
    model = _model("Gemm", feeds, transB=1)
    sess = provider_session(model, "NumbaExecutionProvider")
    first = sess.run(None, feeds)[0]
    feeds["b"] *= 2.0  # the same arrays, new values
    feeds["c"] += 1.0
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = sess.run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(got, first)


def test_bad_shapes_name_the_node(rng: np.random.Generator) -> None:
    feeds = {
        "a": rng.standard_normal((2, 3)).astype(np.float32),
        "b": rng.standard_normal((3, 4)).astype(np.float32),
        "c": rng.standard_normal(4).astype(np.float32),
    }
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="my_gemm")
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in feeds],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    sess = provider_session(model, "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    for name, value in {
        "a": np.ones((2, 5), np.float32),
        "b": np.ones((3, 4, 1), np.float32),
        "c": np.ones(3, np.float32),
    }.items():
        with pytest.raises(InvalidArgument, match="my_gemm"):
            sess.run(None, {**feeds, name: value})


def test_integer_products_stay_with_numpy() -> None:
    feeds = {"a": np.ones((2, 3), np.int32), "b": np.ones((3, 4), np.int32)}
    sess = provider_session(_model("MatMul", feeds), "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numpy"]
    np.testing.assert_array_equal(sess.run(None, feeds)[0], np.full((2, 4), 3, np.int32))
