"""The vectorizable float32 exp/sigmoid/tanh (`vecmath`): accuracy on a dense sample of all
float32 values and every value of the edge ranges (denormal results, overflow, underflow),
NaN and +-inf; and their use by fused groups (float32 only; float64 keeps numpy's functions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout_numba.vecmath import exp_f32, sigmoid_f32, tanh_f32

_ALL_BITS_STRIDE = 509  # ~8.4M of the 2^32 float32 bit patterns


def _kernel(stmts: Callable[[str, str], list[str]], contract: bool) -> Any:
    """The statements in a loop, compiled as the provider compiles kernels holding them (with
    fast-math `contract`, `vecmath.MARK`) or without it: both must meet the bounds."""
    body = "".join(f"        {s}\n" for s in stmts("x", "v"))
    src = (
        "def k(a, out):\n    for i in range(a.shape[0]):\n        x = a[i]\n"
        + body
        + "        out[i] = v\n"
    )
    env: dict[str, Any] = {"np": np}
    exec(src, env)
    fastmath = {"contract"} if contract else False
    return numba.njit(error_model="numpy", fastmath=fastmath)(env["k"])


def _sample() -> np.ndarray:
    bits = np.arange(0, 2**32, _ALL_BITS_STRIDE, dtype=np.uint64).astype(np.uint32)
    edges = [
        np.arange(  # every float32 in [-104, -87]: exp's denormal results and underflow to 0
            np.float32(-87).view(np.uint32), np.float32(-104).view(np.uint32), dtype=np.uint32
        ),
        np.arange(  # every float32 in [88, 89]: the overflow threshold
            np.float32(88).view(np.uint32), np.float32(89).view(np.uint32), dtype=np.uint32
        ),
        np.arange(0, 2**20, dtype=np.uint32),  # tiny positives, denormals
        np.arange(2**31, 2**31 + 2**20, dtype=np.uint32),  # tiny negatives
    ]
    x = np.concatenate([bits, *edges]).view(np.float32)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    return np.concatenate([x, special])


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in representable float32 values (sign-magnitude order made monotonic)."""

    def key(v: np.ndarray) -> np.ndarray:
        i = v.view(np.int32).astype(np.int64)
        k: np.ndarray = np.where(i < 0, -(i & 0x7FFFFFFF), i)
        return k

    d: np.ndarray = np.abs(key(got) - key(want))
    return d


@pytest.fixture(scope="module")
def sample() -> np.ndarray:
    return _sample()


def _f64(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # signalling NaN bit patterns warn when widened
        return x.astype(np.float64)


def _run(stmts: Callable[[str, str], list[str]], x: np.ndarray, contract: bool) -> np.ndarray:
    out = np.empty_like(x)
    _kernel(stmts, contract)(x, out)
    return out


@pytest.mark.parametrize("contract", [False, True], ids=["two-roundings", "fma"])
def test_exp_within_one_ulp_of_correctly_rounded(sample: np.ndarray, contract: bool) -> None:
    got = _run(exp_f32, sample, contract)
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.exp(_f64(sample)).astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    assert _ulps(got[~nan], want[~nan]).max() <= 1
    assert got[-4] == np.inf and got[-3] == 0.0  # exp(+inf), exp(-inf)
    assert np.all(got[~nan] >= 0)


@pytest.mark.parametrize("contract", [False, True], ids=["two-roundings", "fma"])
def test_sigmoid_relative_accuracy(sample: np.ndarray, contract: bool) -> None:
    got = _run(sigmoid_f32, sample, contract)
    with np.errstate(all="ignore"):
        want = (1.0 / (1.0 + np.exp(-_f64(sample)))).astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    assert _ulps(got[~nan], want[~nan]).max() <= 4
    assert got[-4] == 1.0 and got[-3] == 0.0


@pytest.mark.parametrize("contract", [False, True], ids=["two-roundings", "fma"])
def test_tanh_relative_accuracy(sample: np.ndarray, contract: bool) -> None:
    got = _run(tanh_f32, sample, contract)
    want = np.tanh(_f64(sample))
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    err = np.abs(got[~nan] - want[~nan])
    assert np.all(err <= 3.7e-7 * np.abs(want[~nan]) + 1e-45)
    assert got[-4] == 1.0 and got[-3] == -1.0


def _silu_model(elem: int) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["y"]),
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Tanh", ["x"], ["t"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, [4, 1000])],
        [helper.make_tensor_value_info(o, elem, [4, 1000]) for o in ("y", "e", "t")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_group_matches_numpy(dtype: type) -> None:
    """A SiLU/Exp/Tanh group agrees with numpy (float32: to the stated accuracy; float64 runs
    numpy's functions, so to rounding)."""
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    model = _silu_model(elem).SerializeToString()
    so = turnout.SessionOptions()
    so.fallback = "error"
    sess = turnout.InferenceSession(model, so, providers=["NumbaExecutionProvider"])
    x: np.ndarray = np.random.default_rng(0).standard_normal((4, 1000)).astype(dtype) * 30
    x[0, :6] = [np.nan, np.inf, -np.inf, 0.0, 88.8, -100.0]
    y, e, t = sess.run(None, {"x": x})
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        want_e: np.ndarray = np.exp(x64).astype(dtype)
        want_y: np.ndarray = (x64 / (1.0 + np.exp(-x64))).astype(dtype)
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(e, want_e, rtol=rtol)
    np.testing.assert_allclose(y, want_y, rtol=rtol, atol=1e-30)
    np.testing.assert_allclose(t, np.tanh(x64).astype(dtype), rtol=rtol, atol=1e-30)
    sources = {a.source for a in sess.partition_report().assignments}
    assert sources <= {"fused", "numba"}  # generated kernels, not numpy's
