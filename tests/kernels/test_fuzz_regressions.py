"""Kernel bugs the fuzzer found (issue 11), each held to onnxruntime on every provider that runs it.

The corpus replays (tests/fuzz/corpus) hold the exact fuzzed models; these tests hold the fixed
behaviour around them:

- SoftmaxCrossEntropyLoss (CPU, OpenCL) took log(softmax(x)): logits 1000 and -1000 gave
  log(0) = -inf, a loss of inf where onnxruntime gives 3500. Now a stable log-softmax.
- GridSample cubic with zeros padding (CPU, and numba through it) multiplied the zero weight of a
  tap outside the image by the clamped pixel it read: a NaN pixel made NaN of a sample at
  (-100, -100), onnxruntime gives 0. Taps outside now contribute nothing.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from turnout.graph.errors import Fail, InvalidArgument
from turnout.tools.testing import (
    check_official_case,
    iter_node_cases,
    one_node_model,
    provider_session,
    run_onnxruntime,
    run_own_kernel,
)

NUMBA = "NumbaExecutionProvider"
OPENCL = "OpenCLExecutionProvider"


def _opencl_reason() -> str | None:
    if importlib.util.find_spec("turnout_opencl") is None:
        return "turnout-opencl is not installed"
    from turnout_opencl.factory import OpenCLProviderFactory

    avail = OpenCLProviderFactory().probe()
    return None if avail.ok else f"no OpenCL device: {avail.reason}"


_OCL_REASON = _opencl_reason()
_NUMBA_PARAM = pytest.param(
    NUMBA,
    marks=pytest.mark.skipif(
        importlib.util.find_spec("turnout_numba") is None, reason="turnout-numba is not installed"
    ),
)
_OPENCL_PARAM = pytest.param(
    OPENCL, marks=pytest.mark.skipif(_OCL_REASON is not None, reason=str(_OCL_REASON))
)
ALL = ["cpu", _NUMBA_PARAM, _OPENCL_PARAM]


def _run(provider: str, node: onnx.NodeProto, inputs: Sequence[Any], opset: int = 21) -> list[Any]:
    """The node's outputs from turnout's own CPU kernel, or from a session on `provider` alone
    (fallback "error": a node the provider declines fails the test)."""
    if provider == "cpu":
        return run_own_kernel(node, inputs, opset)
    sess = provider_session(one_node_model(node, inputs, opset), provider)
    feeds = {n: v for n, v in zip(node.input, inputs) if n}
    with np.errstate(all="ignore"):
        return list(sess.run(None, feeds))


def _assert_same(want: Sequence[Any], got: Sequence[Any], rtol: float = 1e-5) -> None:
    """Same count, dtypes and shapes; values close, NaN and inf exactly where expected."""
    assert len(got) == len(want)
    for i, (w, g) in enumerate(zip(want, got)):
        g = np.asarray(g)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), (
            f"output {i}: {g.dtype}{g.shape}, expected {w.dtype}{w.shape}"
        )
        np.testing.assert_allclose(
            g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=1e-6, err_msg=f"out {i}"
        )


# ------------------------------------------------------------------------------------------
# SoftmaxCrossEntropyLoss: a stable log-softmax

SCE_CASES = list(iter_node_cases({"SoftmaxCrossEntropyLoss"}))


@pytest.mark.parametrize("case", SCE_CASES, ids=[c.name for c in SCE_CASES])
def test_sce_official(case: Any) -> None:
    """The CPU provider's own kernel (it ran on onnx.reference before) passes the node tests."""
    check_official_case(case)


@pytest.mark.parametrize("provider", ALL)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sce_large_logits(provider: str, reduction: str, dtype: type) -> None:
    x = np.array([[1000, -1000], [0, 5000]], dtype)
    y = np.array([1, 0], np.int64)
    node = helper.make_node(
        "SoftmaxCrossEntropyLoss", ["x", "y"], ["loss", "logp"], reduction=reduction
    )
    want = run_onnxruntime(node, [x, y])
    assert np.isfinite(want[0]).all() and np.isfinite(want[1]).all()
    _assert_same(want, _run(provider, node, [x, y]))


@pytest.mark.parametrize("provider", ALL)
@pytest.mark.parametrize("ignore", [None, 0, -1])
def test_sce_weighted_ignore_large_logits(provider: str, ignore: int | None) -> None:
    """Weights, ignore_index and a (N, C, D) input with logits far apart."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 4, 2)) * 400).astype(np.float32)
    y = np.array([[0, 3], [1 if ignore is None else ignore, 2], [1, 0]], np.int64)
    w = np.array([0.5, 1.0, 2.0, 1.5], np.float32)
    attrs = {} if ignore is None else {"ignore_index": ignore}
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "y", "w"], ["loss"], **attrs)
    want = run_onnxruntime(node, [x, y, w])
    assert np.isfinite(want[0]).all()
    _assert_same(want, _run(provider, node, [x, y, w]), rtol=1e-4)


def test_sce_negative_target_counts_from_end() -> None:
    """onnxruntime gathers a target in [-C, 0) from the end (and refuses one >= C)."""
    x = np.array([[1.0, 2.0, 30.0], [0.5, -3.0, 2.0]], np.float32)
    y = np.array([0, -1], np.int64)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "y"], ["loss"], reduction="none")
    _assert_same(run_onnxruntime(node, [x, y]), run_own_kernel(node, [x, y]))
    with pytest.raises(InvalidArgument):
        run_own_kernel(node, [x, np.array([0, 3], np.int64)])


# ------------------------------------------------------------------------------------------
# GridSample with zeros padding: taps outside the image contribute nothing


@pytest.mark.parametrize("provider", ["cpu", _NUMBA_PARAM])
@pytest.mark.parametrize("mode", ["cubic", "linear", "nearest"])
@pytest.mark.parametrize("align", [0, 1])
def test_gridsample_zeros_padding_ignores_pixels_outside(
    provider: str, mode: str, align: int
) -> None:
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = np.nan  # read by every clamped tap at the top-left corner
    grid = np.array(
        [[[[-100.0, -100.0], [-1.6, -1.6], [-1.2, -1.0], [0.3, -0.2], [100.0, 0.5]]]], np.float32
    )
    node = helper.make_node(
        "GridSample", ["x", "g"], ["y"], mode=mode, padding_mode="zeros", align_corners=align
    )
    want = run_onnxruntime(node, [x, grid], 20)
    assert want[0][0, 0, 0, 0] == 0
    _assert_same(want, _run(provider, node, [x, grid], 20))


# ------------------------------------------------------------------------------------------
# OpenCL Softplus: max(x, 0) + log1p(exp(-|x|)), as the CPU provider


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.skipif(_OCL_REASON is not None, reason=str(_OCL_REASON))
def test_opencl_softplus_large(dtype: type) -> None:
    x = np.array([100, -100, 0, 1e-3, 20, -20, 60000, -np.inf, np.inf, np.nan], dtype)
    node = helper.make_node("Softplus", ["x"], ["y"])
    # onnxruntime has Softplus for float32 only: the CPU provider is the reference otherwise
    want = run_onnxruntime(node, [x]) if dtype == np.float32 else run_own_kernel(node, [x])
    assert want[0][0] == 100
    _assert_same(want, _run(OPENCL, node, [x]), rtol=1e-3 if dtype == np.float16 else 1e-5)


# ------------------------------------------------------------------------------------------
# OpenCL norms: LayerNormalization's Mean/InvStdDev dtype, parameter sizes checked


@pytest.mark.skipif(_OCL_REASON is not None, reason=str(_OCL_REASON))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("stash", [None, 1])
def test_opencl_layernorm_stats_dtype(dtype: type, stash: int | None) -> None:
    """Mean and InvStdDev come out float32 (stash_type=1) whatever the input's float type."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4)).astype(dtype)
    w = rng.standard_normal(4).astype(dtype)
    b = rng.standard_normal(4).astype(dtype)
    attrs = {} if stash is None else {"stash_type": stash}
    node = helper.make_node("LayerNormalization", ["x", "w", "b"], ["y", "m", "i"], **attrs)
    want = run_onnxruntime(node, [x, w, b])
    assert want[1].dtype == want[2].dtype == np.float32
    _assert_same(want, _run(OPENCL, node, [x, w, b]), rtol=1e-2 if dtype == np.float16 else 1e-5)


def _unknown_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every graph input's shape unknown: nothing can be declined up front."""
    for vi in model.graph.input:
        vi.type.tensor_type.ClearField("shape")
    return model


def _raises_like_cpu(node: onnx.NodeProto, inputs: Sequence[Any], opset: int = 21) -> None:
    """With shapes known at session creation the model is refused at load (shape inference) or
    the OpenCL provider declines the node and the CPU provider raises; with shapes unknown the
    OpenCL run raises the same InvalidArgument."""
    from turnout import InferenceSession

    feeds = {n: v for n, v in zip(node.input, inputs) if n}
    model = one_node_model(node, inputs, opset)
    with pytest.raises(InvalidArgument):
        run_own_kernel(node, inputs, opset)
    try:
        sess = InferenceSession(
            model.SerializeToString(), providers=[OPENCL, "CPUExecutionProvider"]
        )
    except Fail:
        pass
    else:
        with pytest.raises(InvalidArgument):
            sess.run(None, feeds)
    sess = provider_session(_unknown_shapes(model), OPENCL)
    with pytest.raises(InvalidArgument):
        sess.run(None, feeds)


_X3 = np.ones((1, 3, 2), np.float32)
_C3 = np.ones(3, np.float32)


@pytest.mark.skipif(_OCL_REASON is not None, reason=str(_OCL_REASON))
@pytest.mark.parametrize(
    "x,s,b",
    [
        (_X3, np.ones(0, np.float32), np.ones(0, np.float32)),  # the corpus crash
        (_X3, np.ones(2, np.float32), _C3),
        (_X3, _C3, np.ones(1, np.float32)),
        (_X3, np.ones((3, 2), np.float32), _C3),
        (np.ones((2, 3), np.float32), _C3, _C3),  # rank 2: the CPU provider wants 3
    ],
    ids=["empty", "short-scale", "short-bias", "2d-scale", "rank-2"],
)
def test_opencl_instancenorm_checks_parameters(x: Any, s: Any, b: Any) -> None:
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])
    _raises_like_cpu(node, [x, s, b])


@pytest.mark.skipif(_OCL_REASON is not None, reason=str(_OCL_REASON))
@pytest.mark.parametrize("bad", range(4))
@pytest.mark.parametrize("size", [0, 2])
def test_opencl_batchnorm_checks_parameters(bad: int, size: int) -> None:
    params = [np.ones(3, np.float32) for _ in range(4)]
    params[bad] = np.ones(size, np.float32)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    _raises_like_cpu(node, [np.ones((2, 3, 2), np.float32), *params])


@pytest.mark.skipif(_OCL_REASON is not None, reason=str(_OCL_REASON))
@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization"])
@pytest.mark.parametrize("size", [0, 3])
def test_opencl_row_norms_check_scale(op: str, size: int) -> None:
    """(These checked their scale already: kept so that they go on doing it.)"""
    node = helper.make_node(op, ["x", "s"], ["y"])
    _raises_like_cpu(node, [np.ones((2, 4), np.float32), np.ones(size, np.float32)], 23)


@pytest.mark.skipif(_OCL_REASON is not None, reason=str(_OCL_REASON))
@pytest.mark.parametrize("op", ["InstanceNormalization", "BatchNormalization"])
def test_opencl_channel_norms_still_run(op: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    params = [rng.standard_normal(3).astype(np.float32) for _ in range(2)]
    names = ["x", "s", "b"]
    if op == "BatchNormalization":
        params += [rng.standard_normal(3).astype(np.float32), rng.random(3).astype(np.float32)]
        names += ["m", "v"]
    node = helper.make_node(op, names, ["y"])
    want = run_onnxruntime(node, [x, *params])
    _assert_same(want, _run(OPENCL, node, [x, *params]), rtol=1e-4)
    model = _unknown_shapes(one_node_model(node, [x, *params]))
    got = provider_session(model, OPENCL).run(None, dict(zip(names, [x, *params])))
    _assert_same(want, got, rtol=1e-4)


# ------------------------------------------------------------------------------------------
# OpenCL Attention: V (and the value cache) in its own float type


@pytest.mark.skipif(_OCL_REASON is not None, reason=str(_OCL_REASON))
@pytest.mark.parametrize(("qk", "v"), [(np.float64, np.float32), (np.float32, np.float64)])
@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("rank", [3, 4])
def test_opencl_attention_mixed_float_types(qk: type, v: type, past: bool, rank: int) -> None:
    """onnxruntime has no kernel for T1 != T2: the CPU provider (onnx.reference) is the
    reference, and the same model with V cast to Q's type gives (nearly) the same values."""
    from turnout.tools.testing import cpu_session

    rng = np.random.default_rng(6)
    heads = {"q_num_heads": 2, "kv_num_heads": 2} if rank == 3 else {}
    shape = (1, 3, 8) if rank == 3 else (1, 2, 3, 4)
    q, k = (rng.standard_normal(shape).astype(qk) for _ in range(2))
    vals = [q, k, rng.standard_normal(shape).astype(v)]
    names = ["q", "k", "v"]
    outs = ["y"]
    if past:
        vals += [
            rng.standard_normal((1, 2, 2, 4)).astype(qk),
            rng.standard_normal((1, 2, 2, 4)).astype(v),
        ]
        names += ["", "pk", "pv"]
        outs += ["present_k", "present_v"]
    node = helper.make_node("Attention", names, outs, **heads)
    inputs = vals[:3] + ([None, *vals[3:]] if past else [])
    model = one_node_model(node, inputs, 23)
    feeds = {n: x for n, x in zip(names, inputs) if n}
    want = cpu_session(model).run(None, feeds)
    assert [w.dtype for w in want] == [np.dtype(qk), np.dtype(qk), np.dtype(v)][: len(outs)]
    got = provider_session(model, OPENCL).run(None, feeds)
    _assert_same(want, got, rtol=1e-4)


# ------------------------------------------------------------------------------------------
# Resize tf_crop_and_resize on integers: extrapolation_value rounded and saturated


def _crop_resize(dtype: type, mode: str, value: float) -> tuple[onnx.NodeProto, list[Any]]:
    x = np.arange(4, dtype=dtype).reshape(1, 1, 2, 2)
    roi = np.array([0, 0, -0.5, -0.5, 1, 1, 1.5, 1.5], np.float32)
    node = helper.make_node(
        "Resize",
        ["x", "roi", "", "sizes"],
        ["y"],
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=value,
    )
    return node, [x, roi, None, np.array([1, 1, 3, 3], np.int64)]


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int8])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("value", [10.0, 10.7, -3.5, 2.5, 1e30, -1e30])
def test_cpu_resize_int_extrapolation(dtype: type, mode: str, value: float) -> None:
    """onnx.reference rounds half to even and saturates (onnxruntime ignores the roi for
    integers); the CPU provider's nearest mode truncated (10.7 gave 10, 1e30 raised)."""
    from turnout.tools.testing import run_reference

    node, inputs = _crop_resize(dtype, mode, value)
    want = run_reference(node, inputs, 19)
    _assert_same(want, run_own_kernel(node, inputs, 19))


@pytest.mark.skipif(_OCL_REASON is not None, reason=str(_OCL_REASON))
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64, np.uint64, np.float32])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("value", [10.0, 10.7, -3.5, 1e30, -1e30, float("nan")])
def test_opencl_resize_int_extrapolation(dtype: type, mode: str, value: float) -> None:
    """OpenCL wrote 0 into integer outputs outside the roi; it now agrees with the CPU provider
    (64-bit saturation and NaN, which gives 0 in an integer output, included)."""
    from turnout.tools.testing import cpu_session

    node, inputs = _crop_resize(dtype, mode, value)
    model = one_node_model(node, inputs, 19)
    feeds = {"x": inputs[0], "roi": inputs[1], "sizes": inputs[3]}
    want = cpu_session(model).run(None, feeds)
    got = provider_session(model, OPENCL).run(None, feeds)
    assert got[0].dtype == want[0].dtype
    np.testing.assert_array_equal(got[0], want[0])
