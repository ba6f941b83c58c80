"""numba BatchNormalization (inference mode): random ranks/dtypes/epsilons/opsets against the
CPU provider's numpy kernel and onnxruntime, a 1-thread session, declines of training mode and
bad parameter shapes.

The official node cases run in test_numba_provider.py::test_official_case.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

import turnout
from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import cpu_session, one_node_model, provider_session, run_onnxruntime

BF16 = np.dtype(ml_dtypes.bfloat16)
_NAMES = ["x", "scale", "B", "mean", "var"]


def _session(model: onnx.ModelProto, **opts: Any) -> turnout.InferenceSession:
    return provider_session(model, "NumbaExecutionProvider", **opts)


def _compare(
    node: Any,
    inputs: list[np.ndarray],
    opset: int,
    source: str = "numba",
    rtol: float = 1e-5,
    atol: float = 1e-5,
    **opts: Any,
) -> np.ndarray:
    model = one_node_model(node, inputs, opset)
    sess = _session(model, **opts)
    assert [a.source for a in sess.partition_report().assignments] == [source]
    feeds = dict(zip(node.input, inputs))
    got = sess.run(None, feeds)
    want = cpu_session(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
    return got[0]


def _params(rng: np.random.Generator, shape: tuple[int, ...], t1: Any, t2: Any) -> list[np.ndarray]:
    scale = rng.uniform(0.5, 2.0, shape).astype(t1)
    bias = rng.standard_normal(shape).astype(t1)
    mean = rng.standard_normal(shape).astype(t2)
    var = rng.uniform(0.1, 3.0, shape).astype(t2)
    return [scale, bias, mean, var]


def _tol(dt: np.dtype[Any]) -> tuple[float, float]:
    if dt == BF16:
        return 2e-2, 2e-2
    if dt == np.float16:
        return 2e-3, 4e-3
    if dt == np.float64:
        return 1e-12, 1e-12
    return 1e-5, 1e-5


def _case(seed: int) -> tuple[Any, list[np.ndarray], int, int]:
    rng = np.random.default_rng(seed)
    opset = int(rng.choice([6, 7, 9, 14, 15]))
    dtypes: list[Any] = [np.float32, np.float32, np.float64, np.float16]
    if opset >= 14:
        dtypes.append(BF16)
    dt = np.dtype(dtypes[int(rng.integers(len(dtypes)))])
    rank = int(rng.integers(2, 6))
    n, c = int(rng.integers(1, 4)), int(rng.integers(1, 9))
    spatial = tuple(int(v) for v in rng.integers(1, 7, rank - 2))
    x = (rng.standard_normal((n, c, *spatial)) * 3).astype(dt)
    t1 = t2 = dt
    if opset >= 15:  # scale/B and mean/var have their own types
        t1 = np.dtype(dtypes[int(rng.integers(len(dtypes)))])
        t2 = np.dtype(dtypes[int(rng.integers(len(dtypes)))])
    attrs: dict[str, Any] = {}
    if rng.random() < 0.6:
        attrs["epsilon"] = float(rng.choice([1e-5, 1e-3, 0.1, 0.0]))
    if opset < 7:
        attrs["is_test"] = 1
    if opset >= 14 and rng.random() < 0.5:
        attrs["training_mode"] = 0
    if 7 <= opset < 14 and rng.random() < 0.3:
        attrs["momentum"] = 0.8  # unused in inference mode
    node = helper.make_node("BatchNormalization", _NAMES, ["y"], **attrs)
    inputs = [x, *_params(rng, (c,), t1, t2)]
    # every variant runs with 1 thread; the parallel one on float32 (cold compiles stay few)
    threads = 0 if dt == np.float32 else 1
    return node, inputs, opset, threads


@pytest.mark.parametrize("seed", range(24))
def test_batchnorm_random_vs_cpu(seed: int) -> None:
    node, inputs, opset, threads = _case(seed)
    rtol, atol = _tol(inputs[0].dtype)
    _compare(node, inputs, opset, rtol=rtol, atol=atol, intra_op_num_threads=threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(2, 64, 28, 28), (1, 1024, 7, 7), (3, 40)])
def test_batchnorm_cnn_shapes(shape: tuple[int, ...], threads: int) -> None:
    rng = np.random.default_rng(len(shape) * 7 + threads)
    x = rng.standard_normal(shape).astype(np.float32)
    inputs = [x, *_params(rng, (shape[1],), np.float32, np.float32)]
    node = helper.make_node("BatchNormalization", _NAMES, ["y"], epsilon=1e-5)
    got = _compare(node, inputs, 15, intra_op_num_threads=threads)
    np.testing.assert_allclose(got, run_onnxruntime(node, inputs, 15)[0], rtol=1e-5, atol=1e-5)


def test_batchnorm_matches_the_formula_in_float64() -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 4, 5))
    p = _params(rng, (3,), np.float64, np.float64)
    node = helper.make_node("BatchNormalization", _NAMES, ["y"], epsilon=0.01)
    got = _compare(node, [x, *p], 15, intra_op_num_threads=1)
    r = (-1, 1, 1)
    eps = float(np.float32(0.01))  # an ONNX float attribute is a float32
    scale, bias, mean, var = (v.reshape(r) for v in p)
    want = (x - mean) / np.sqrt(var + eps) * scale + bias
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_batchnorm_spatial0_per_element_params() -> None:
    """Before opset 9, spatial=0 takes parameters of X.shape[1:], as the CPU kernel does."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    node = helper.make_node("BatchNormalization", _NAMES, ["y"], spatial=0, epsilon=1e-3)
    _compare(node, [x, *_params(rng, (3, 4, 5), np.float32, np.float32)], 7)
    # mixed (C,) and per-element parameters broadcast like the CPU kernel's
    mixed = _params(rng, (3, 4, 5), np.float32, np.float32)
    mixed[0] = mixed[0][:, 0, 0].copy()
    mixed[2] = mixed[2][:, 0, 0].copy()
    _compare(node, [x, *mixed], 7)


def test_batchnorm_empty_batch() -> None:
    rng = np.random.default_rng(2)
    x = np.zeros((0, 3, 4), np.float32)
    node = helper.make_node("BatchNormalization", _NAMES, ["y"])
    got = _compare(node, [x, *_params(rng, (3,), np.float32, np.float32)], 15)
    assert got.shape == (0, 3, 4)


def test_batchnorm_training_goes_to_numpy() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    p = _params(rng, (3,), np.float32, np.float32)
    train = helper.make_node(
        "BatchNormalization", _NAMES, ["y", "rm", "rv"], training_mode=1, momentum=0.9
    )
    _compare(train, [x, *p], 15, source="numpy")
    # opset 7..13: extra outputs mean training
    five = ["y", "m", "v", "sm", "sv"]
    stats = helper.make_node("BatchNormalization", _NAMES, five)
    _compare(stats, [x, *p], 9, source="numpy")
    # opset 6: is_test=0 with statistics outputs is training too
    old = helper.make_node("BatchNormalization", _NAMES, five, is_test=0)
    _compare(old, [x, *p], 6, source="numpy")


def _unshaped(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its input shapes unknown: a mismatch that shape inference would refuse at
    load (as onnxruntime does) reaches the kernel's own check at run time instead."""
    for vi in model.graph.input:
        vi.type.tensor_type.ClearField("shape")
    return model


def test_batchnorm_bad_parameter_shape() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    for i, what in enumerate(["scale", "B", "mean", "var"]):
        p = _params(rng, (4,), np.float32, np.float32)
        p[i] = p[i][:3]
        node = helper.make_node("BatchNormalization", _NAMES, ["y"], name="bn7")
        sess = _session(_unshaped(one_node_model(node, [x, *p], 15)))
        assert [a.source for a in sess.partition_report().assignments] == ["numba"]
        want = rf"bn7: {what} has shape \(3,\), expected \(4,\)"
        with pytest.raises(InvalidArgument, match=want):
            sess.run(None, dict(zip(_NAMES, [x, *p])))


def test_batchnorm_rank1_input_is_refused() -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal(4).astype(np.float32)
    p = _params(rng, (4,), np.float32, np.float32)
    node = helper.make_node("BatchNormalization", _NAMES, ["y"], name="bn1")
    sess = _session(_unshaped(one_node_model(node, [x, *p], 15)))
    with pytest.raises(InvalidArgument, match="bn1: input must be at least 2-D"):
        sess.run(None, dict(zip(_NAMES, [x, *p])))
