"""numba Conv, FusedConv and FusedGemm: random geometry, groups, dtypes and activations against
the CPU provider's numpy kernels, and the errors bad shapes must raise.

The official Conv node cases run in test_numba_provider.py::test_official_case.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import cpu_session

ACTIVATIONS: list[tuple[str, list[float]]] = [
    ("", []),
    ("Relu", []),
    ("LeakyRelu", [0.1]),
    ("Sigmoid", []),
    ("Tanh", []),
    ("HardSigmoid", [0.3, 0.4]),
    ("Clip", [-0.5, 0.7]),
    ("Gelu", []),
    ("GeluTanh", []),
    ("HardSwish", [0.2, 0.4]),
    ("Swish", [1.5]),
]
_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE}

pytestmark = pytest.mark.usefixtures("conv_kernel_paths")


def _model(node: onnx.NodeProto, feeds: dict[str, np.ndarray], n_out: int = 1) -> bytes:
    """A one-node model; inputs other than x, w, a and b get no declared shape, so that the
    tests can feed wrong shapes to the kernel itself."""
    inputs = [
        helper.make_tensor_value_info(
            k, _ELEM[v.dtype], list(v.shape) if k in ("x", "w", "a", "b") else None
        )
        for k, v in feeds.items()
    ]
    outputs = [helper.make_tensor_value_info(o, _ELEM[next(iter(feeds.values())).dtype], None)
               for o in node.output[:n_out]]  # fmt: skip
    graph = helper.make_graph([node], "g", inputs, outputs)
    opsets = [helper.make_opsetid("", 17)]
    if node.domain:
        opsets.append(helper.make_opsetid(node.domain, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def _both(model: bytes, feeds: dict[str, np.ndarray], threads: int = 0) -> tuple[Any, Any]:
    so = turnout.SessionOptions()
    so.fallback = "error"
    so.graph_optimization_level = turnout.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = turnout.InferenceSession(
        model, so, providers=[("NumbaExecutionProvider", {"intra_op_num_threads": threads})]
    )
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    cpu = cpu_session(onnx.load_from_string(model))
    return sess.run(None, feeds)[0], cpu.run(None, feeds)[0]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = 1e-4 if got.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _conv_case(seed: int) -> tuple[onnx.NodeProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    dt = np.dtype(rng.choice([np.float32, np.float64]))
    nd = int(rng.choice([1, 2, 2, 2]))
    kind = rng.choice(["dense", "grouped", "depthwise", "pointwise"])
    group = {"dense": 1, "pointwise": 1, "grouped": int(rng.integers(2, 4)), "depthwise": 0}[kind]
    cg = int(rng.integers(1, 4))
    if kind == "depthwise":
        group = int(rng.integers(1, 6))
        cg = 1
    c = cg * group
    m = group * int(rng.integers(1, 4))
    k = [1] * nd if kind == "pointwise" else [int(v) for v in rng.integers(1, 4, nd)]
    spatial = [int(v) for v in rng.integers(6, 12, nd)]
    attrs: dict[str, Any] = {"group": group, "kernel_shape": k}
    if kind != "pointwise":
        attrs["strides"] = [int(v) for v in rng.integers(1, 3, nd)]
        attrs["dilations"] = [int(v) for v in rng.integers(1, 3, nd)]
        pad_mode = rng.choice(["pads", "SAME_UPPER", "SAME_LOWER", "VALID"])
        if pad_mode == "pads":
            attrs["pads"] = [int(v) for v in rng.integers(0, 3, 2 * nd)]
        else:
            attrs["auto_pad"] = str(pad_mode)
    fused = bool(rng.integers(0, 2))
    names = ["x", "w"]
    feeds = {
        "x": rng.standard_normal((int(rng.integers(1, 3)), c, *spatial)).astype(dt),
        "w": rng.standard_normal((m, cg, *k)).astype(dt),
    }
    if rng.integers(0, 2):
        names.append("b")
        feeds["b"] = rng.standard_normal(m).astype(dt)
    if fused:
        act, params = ACTIVATIONS[int(rng.integers(0, len(ACTIVATIONS)))]
        attrs["activation"] = act
        if params:
            attrs["activation_params"] = params
        node = helper.make_node("FusedConv", names, ["y"], domain="ai.turnout", **attrs)
    else:
        node = helper.make_node("Conv", names, ["y"], **attrs)
    return node, feeds


# Each random case compiles kernels of its own (CI's minutes go to compiling). 40 convs cover
# every kind, dtype and padding mode, and with the 24 products every activation;
# test_numba_conv_paths sweeps the geometries systematically.
@pytest.mark.parametrize("seed", range(40))
def test_conv_matches_cpu(seed: int) -> None:
    node, feeds = _conv_case(seed)
    got, want = _both(_model(node, feeds), feeds, threads=1 if seed % 3 == 0 else 0)
    _close(got, want)


@pytest.mark.parametrize("with_bias", [False, True])
def test_fused_conv_residual(with_bias: bool) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    feeds = {"x": x, "w": w}
    names = ["x", "w", "b" if with_bias else "", "z"]
    if with_bias:
        feeds["b"] = rng.standard_normal(6).astype(np.float32)
    feeds["z"] = rng.standard_normal((2, 6, 9, 9)).astype(np.float32)
    node = helper.make_node(
        "FusedConv", names, ["y"], domain="ai.turnout", pads=[1, 1, 1, 1], activation="Relu"
    )
    got, want = _both(_model(node, feeds), feeds)
    _close(got, want)


def _gemm_case(seed: int) -> tuple[onnx.NodeProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    dt = np.dtype(rng.choice([np.float32, np.float64]))
    m, k, n = (int(v) for v in rng.integers(1, 40, 3))
    trans_a, trans_b = (int(v) for v in rng.integers(0, 2, 2))
    lead = [] if trans_a or rng.integers(0, 2) else [int(rng.integers(1, 4))]
    a_shape = [k, m] if trans_a else [*lead, m, k]
    feeds = {
        "a": rng.standard_normal(a_shape).astype(dt),
        "b": rng.standard_normal([n, k] if trans_b else [k, n]).astype(dt),
    }
    c_shape = [[n], [m, n], [1], [m, 1], [*lead, m, n]][int(rng.integers(0, 5))]
    feeds["c"] = rng.standard_normal(c_shape).astype(dt)
    act, params = ACTIVATIONS[int(rng.integers(0, len(ACTIVATIONS)))]
    attrs: dict[str, Any] = {"transA": trans_a, "transB": trans_b, "activation": act}
    if params:
        attrs["activation_params"] = params
    if rng.integers(0, 2):
        attrs["alpha"] = float(rng.uniform(0.5, 2))
        attrs["beta"] = float(rng.choice([0.0, 0.5, 1.5]))
    node = helper.make_node("FusedGemm", ["a", "b", "c"], ["y"], domain="ai.turnout", **attrs)
    return node, feeds


@pytest.mark.parametrize("seed", range(24))
def test_fused_gemm_matches_cpu(seed: int) -> None:
    node, feeds = _gemm_case(seed)
    got, want = _both(_model(node, feeds), feeds, threads=1 if seed % 2 else 0)
    _close(got, want)


def test_nan_passes_through_activations() -> None:
    for act, params in ACTIVATIONS:
        a = np.array([[np.nan, 1.0, -1.0]], np.float32)
        feeds = {"a": a, "b": np.eye(3, dtype=np.float32)}
        attrs: dict[str, Any] = {"activation": act}
        if params:
            attrs["activation_params"] = params
        node = helper.make_node("FusedGemm", ["a", "b"], ["y"], domain="ai.turnout", **attrs)
        got, want = _both(_model(node, feeds), feeds)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        _close(np.nan_to_num(got), np.nan_to_num(want))


def _numba_session(node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> Any:
    so = turnout.SessionOptions()
    so.fallback = "error"
    return turnout.InferenceSession(_model(node, feeds), so, providers=["NumbaExecutionProvider"])


def test_conv_channel_mismatch_names_the_node() -> None:
    feeds = {"x": np.ones((1, 4, 5, 5), np.float32), "w": np.ones((2, 3, 3, 3), np.float32)}
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv7")
    sess = _numba_session(node, {"x": feeds["x"], "w": feeds["w"]})
    with pytest.raises(InvalidArgument, match="conv7"):
        sess.run(None, feeds)


def test_conv_bad_bias_and_residual() -> None:
    x = np.ones((1, 2, 5, 5), np.float32)
    w = np.ones((3, 2, 3, 3), np.float32)
    node = helper.make_node(
        "FusedConv", ["x", "w", "bias", "z"], ["y"], name="fc", domain="ai.turnout"
    )
    good = {"x": x, "w": w, "bias": np.ones(3, np.float32), "z": np.ones((1, 3, 3, 3), np.float32)}
    sess = _numba_session(node, good)
    with pytest.raises(InvalidArgument, match="fc: bias shape"):
        sess.run(None, {**good, "bias": np.ones(4, np.float32)})
    with pytest.raises(InvalidArgument, match="fc: Z"):
        sess.run(None, {**good, "z": np.ones((1, 3, 4, 4), np.float32)})


def test_gemm_inner_dimension_mismatch() -> None:
    feeds = {"lhs": np.ones((2, 3), np.float32), "b": np.ones((3, 4), np.float32)}
    node = helper.make_node("FusedGemm", ["lhs", "b"], ["y"], name="fg", domain="ai.turnout")
    sess = _numba_session(node, feeds)
    with pytest.raises(InvalidArgument, match="fg: inner dimensions"):
        sess.run(None, {**feeds, "lhs": np.ones((2, 5), np.float32)})


def test_conv3d_stays_with_numpy_with_a_reason() -> None:
    feeds = {"x": np.ones((1, 2, 4, 4, 4), np.float32), "w": np.ones((2, 2, 2, 2, 2), np.float32)}
    node = helper.make_node("Conv", ["x", "w"], ["y"])
    sess = _numba_session(node, feeds)
    (a,) = sess.partition_report().assignments
    assert a.source == "numpy"
    np.testing.assert_allclose(sess.run(None, feeds)[0], np.full((1, 2, 3, 3, 3), 16.0))


def test_float32_gelu_against_exact_erf() -> None:
    """float32 Gelu uses a rational erf: within its documented bounds of the exact Gelu."""
    x = np.linspace(-8, 8, 20001, dtype=np.float32).reshape(-1, 1)
    feeds = {"a": x, "b": np.ones((1, 1), np.float32)}
    node = helper.make_node("FusedGemm", ["a", "b"], ["y"], domain="ai.turnout", activation="Gelu")
    got, _ = _both(_model(node, feeds), feeds)
    xd = x.astype(np.float64)
    exact = 0.5 * xd * (1 + np.vectorize(math.erf)(xd / math.sqrt(2)))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, exact, rtol=1e-3, atol=1.5e-6)
    big = np.abs(exact) > 1e-2
    np.testing.assert_allclose(got[big], exact[big], rtol=5e-5)


@pytest.mark.parametrize("strides", [[1, 1], [2, 2], [2, 1]])
def test_depthwise_many_planes_share_scratch(strides: list[int]) -> None:
    """More planes than scratch chunks: each chunk reuses its zero-padded buffer."""
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.standard_normal((2, 70, 9, 8)).astype(np.float32),
        "w": rng.standard_normal((140, 1, 3, 3)).astype(np.float32),
    }
    node = helper.make_node(
        "Conv", ["x", "w"], ["y"], group=70, pads=[1, 2, 2, 1], strides=strides, dilations=[1, 2]
    )
    got, want = _both(_model(node, feeds), feeds)
    _close(got, want)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("wired", ["all", "no_bias", "plain", "skip_row"])
def test_skip_layer_norm_matches_cpu(dt: Any, wired: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 7, 24)).astype(dt) * 3 + 1
    feeds = {"x": x, "skip": rng.standard_normal((7, 24) if wired == "skip_row" else x.shape)}
    feeds["skip"] = feeds["skip"].astype(dt)
    feeds["gamma"] = rng.standard_normal(24).astype(dt)
    names, outs = ["x", "skip", "gamma"], ["y"]
    if wired != "plain":
        feeds["beta"] = rng.standard_normal(24).astype(dt)
        names.append("beta")
    if wired in ("all", "skip_row"):
        feeds["bias"] = rng.standard_normal(24).astype(dt)
        names.append("bias")
        outs = ["y", "mean", "inv", "total"]
    node = helper.make_node(
        "SkipLayerNormalization", names, outs, domain="ai.turnout", epsilon=1e-3
    )
    so = turnout.SessionOptions()
    so.fallback = "error"
    model = _model(node, feeds, n_out=len(outs))
    got = turnout.InferenceSession(model, so, providers=["NumbaExecutionProvider"])
    assert [a.source for a in got.partition_report().assignments] == ["numba"]
    want = cpu_session(onnx.load_from_string(model))
    for g, w in zip(got.run(None, feeds), want.run(None, feeds)):
        _close(g, w)


def test_skip_layer_norm_bad_skip_names_the_node() -> None:
    feeds = {k: np.ones(s, np.float32) for k, s in (("x", (2, 4)), ("skp", (3, 4)), ("gamma", 4))}
    node = helper.make_node(
        "SkipLayerNormalization", ["x", "skp", "gamma"], ["y"], name="sln", domain="ai.turnout"
    )
    sess = _numba_session(node, feeds)
    with pytest.raises(InvalidArgument, match="sln"):
        sess.run(None, feeds)
