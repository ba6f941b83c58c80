"""numba QLinearAdd, QLinearMul, QLinearSoftmax and QGemm (com.microsoft): bit-equal to turnout's
numpy kernels where they share the float32 formula and within one quantization step of
onnxruntime, for uint8 and int8, with the broadcasts quantized models have (a bias over the
last axis, an attention mask over the key axis, a scalar) and a general one that is
materialized."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import cpu_session, onnxruntime_exact_8bit, provider_session

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the parity oracle")

SHAPES = [
    ((1, 64, 96), (1, 64, 96)),  # residual add
    ((1, 64, 96), (96,)),  # bias over the last axis
    ((1, 4, 16, 16), (1, 1, 1, 16)),  # attention mask over the key axis
    ((2, 5, 7), ()),  # a scalar
    ((3, 1), (1, 1, 5)),  # neither side has the output's shape: materialized
    ((7,), (4, 7)),  # A is the suffix
    ((1, 1), (3, 4, 9)),  # A is a scalar of rank 2
]


def _one_node_model(
    node: onnx.NodeProto,
    inputs: dict[str, np.ndarray],
    out_elem: int,
    inits: dict[str, Any],
    opset: int = 17,
) -> onnx.ModelProto:
    """One com.microsoft node: feeds typed by their arrays, its parameters as initializers."""
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
         for n, v in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], out_elem, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(g, opset_imports=opsets)


def _run_three(model: onnx.ModelProto, feeds: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(numba's output, the numpy kernel's, onnxruntime's); the node must run on numba."""
    sess: Any = provider_session(model, "NumbaExecutionProvider")
    assert [x.source for x in sess.partition_report().assignments] == ["numba"]
    got = sess.run(None, feeds)[0]
    ref = cpu_session(model).run(None, feeds)[0]
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    return got, ref, want


def _model(op: str, a: np.ndarray, b: np.ndarray, params: dict[str, Any]) -> onnx.ModelProto:
    names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point"]
    names += ["c_scale", "c_zero_point"]
    node = helper.make_node(op, names, ["c"], domain="com.microsoft", name=f"my_{op}")
    elem = helper.np_dtype_to_tensor_dtype(a.dtype)
    return _one_node_model(node, {"a": a, "b": b}, elem, params)


def _params(rng: np.random.Generator, dt: Any) -> dict[str, Any]:
    info = np.iinfo(dt)
    z = [dt(v) for v in rng.integers(info.min // 2, info.max // 2, 3)]
    s = rng.uniform(0.01, 0.1, 3).astype(np.float32)
    return {"a_scale": s[0], "a_zero_point": z[0], "b_scale": s[1], "b_zero_point": z[1],
            "c_scale": s[2], "c_zero_point": z[2]}  # fmt: skip


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_against_numpy_and_onnxruntime(op: str, dt: Any, case: int) -> None:
    rng = np.random.default_rng(case)
    info = np.iinfo(dt)
    sa, sb = SHAPES[case]
    a = rng.integers(info.min, info.max, sa, endpoint=True).astype(dt)
    b = np.asarray(rng.integers(info.min, info.max, sb, endpoint=True)).astype(dt)
    model = _model(op, a, b, _params(rng, dt))
    got, ref, want = _run_three(model, {"a": a, "b": b})
    assert got.dtype == dt and got.shape == np.broadcast_shapes(sa, sb)
    np.testing.assert_array_equal(got, ref)
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1


def test_errors() -> None:
    a = np.zeros((2, 3), np.uint8)
    params = _params(np.random.default_rng(0), np.uint8)
    model = _model("QLinearAdd", a, np.zeros((3,), np.uint8), params)
    for i in model.graph.input:  # symbolic dims: the kernel sees the bad shape
        for d in i.type.tensor_type.shape.dim:
            d.dim_param = f"{i.name}{id(d)}"
    sess: Any = provider_session(model, "NumbaExecutionProvider")
    with pytest.raises(InvalidArgument, match="do not broadcast"):
        sess.run(None, {"a": a, "b": np.zeros((4,), np.uint8)})


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize(
    ("shape", "axis", "opset"), [((1, 4, 16, 64), -1, 13), ((2, 3, 8), 1, 12), ((5, 7), -1, 11)]
)
def test_qlinear_softmax(dt: Any, shape: tuple[int, ...], axis: int, opset: int) -> None:
    """Attention scores' softmax (last axis) and the coerced 2-D form before opset 13: within
    one step of onnxruntime and of turnout's numpy kernel, on the numba kernel."""
    rng = np.random.default_rng(len(shape))
    info = np.iinfo(dt)
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(dt)
    y_zp = dt(info.min)  # probabilities: the whole range above 0
    params = {"x_scale": np.float32(0.06), "x_zero_point": dt(info.min // 4),
              "y_scale": np.float32(1 / 256), "y_zero_point": y_zp}  # fmt: skip
    node = helper.make_node(
        "QLinearSoftmax", ["x", *params], ["y"], domain="com.microsoft", axis=axis, opset=opset
    )
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    model = _one_node_model(node, {"x": x}, elem, params, opset)
    got, ref, want = _run_three(model, {"x": x})
    got = got.astype(np.int32)
    assert np.abs(got - ref.astype(np.int32)).max() <= 1
    assert np.abs(got - want.astype(np.int32)).max() <= 1


@pytest.mark.parametrize("case", range(6))
def test_qgemm(case: int) -> None:
    """com.microsoft QGemm on the numba integer GEMM: a classifier's transB weight with C per
    column, per-column b scales, C per row and per element, a float output, alpha: bit-equal
    to the numpy kernel, and within one step (quantized) of onnxruntime where its uint8 x int8
    products are exact on this host (`onnxruntime_exact_8bit`)."""
    rng = np.random.default_rng(case)
    m, k, n = (1, 64, 40) if case % 2 == 0 else (5, 33, 17)
    trans_b = case in (0, 1, 4)
    quantized = case != 5
    c_shape = [(n,), (1, n), (m, 1), (m, n), (), None][case]
    a = rng.integers(0, 255, (m, k), endpoint=True).astype(np.uint8)
    w = rng.integers(-127, 127, (n, k) if trans_b else (k, n), endpoint=True).astype(np.int8)
    b_s = rng.uniform(0.001, 0.01, (n,) if case % 3 == 0 else ()).astype(np.float32)
    inits = {"a_scale": np.float32(0.02), "a_zero_point": np.uint8(131), "b": w,
             "b_scale": b_s, "b_zero_point": np.zeros(b_s.shape, np.int8)}  # fmt: skip
    names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point"]
    if c_shape is not None:
        inits["c"] = rng.integers(-5000, 5000, c_shape).astype(np.int32)
    names.append("c" if c_shape is not None else "")
    if quantized:
        inits["y_scale"] = np.float32(0.05 * np.sqrt(k))
        inits["y_zero_point"] = np.uint8(120)
        names += ["y_scale", "y_zero_point"]
    node = helper.make_node(
        "QGemm", names, ["y"], domain="com.microsoft", transB=int(trans_b), alpha=0.75
    )
    out = onnx.TensorProto.UINT8 if quantized else onnx.TensorProto.FLOAT
    model = _one_node_model(node, {"a": a}, out, inits)
    got, ref, want = _run_three(model, {"a": a})
    np.testing.assert_array_equal(got, ref)
    if not onnxruntime_exact_8bit(np.uint8, np.int8):
        return  # (onnxruntime's sums saturate here: the numpy kernel's exact ones were checked)
    if quantized:
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", [(1, 64, 7, 7), (2, 5, 3), (1, 512, 2, 2)])
def test_qlinear_global_average_pool(dt: Any, shape: tuple[int, ...]) -> None:
    """A ResNet's quantized global pool: bit-equal to the numpy kernel, within one step of
    onnxruntime."""
    rng = np.random.default_rng(len(shape))
    info = np.iinfo(dt)
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(dt)
    params = {"x_scale": np.float32(0.07), "x_zero_point": dt(info.min // 3),
              "y_scale": np.float32(0.05), "y_zero_point": dt(info.max // 4)}  # fmt: skip
    node = helper.make_node(
        "QLinearGlobalAveragePool", ["x", *params], ["y"], domain="com.microsoft"
    )
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    model = _one_node_model(node, {"x": x}, elem, params)
    got, ref, want = _run_three(model, {"x": x})
    np.testing.assert_array_equal(got, ref)
    assert got.shape == want.shape
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
