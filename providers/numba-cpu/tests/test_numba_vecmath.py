"""The vectorizable float32 exp/sigmoid/tanh (`vecmath`): accuracy on a dense sample of all
float32 values and every value of the edge ranges (denormal results, overflow, underflow),
NaN and +-inf; and their use by fused groups (float32 only; float64 keeps numpy's functions).

onnxruntime's float32 sigmoid and tanh (MLAS's, `mlas_logistic_f32`, `mlas_tanh_f32`): bit-equal
to `turnout.sdk.semantics.mlas_logistic`/`mlas_tanh` when compiled with fast-math `contract` (each
Horner step one FMA), and the Sigmoid and Tanh ops, a SiLU group and the fused Conv activations
bit-equal to onnxruntime's, serial and parallel, where this host's onnxruntime computes them with
its x86-64 FMA3 kernels (skipped with the reason elsewhere)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import onnx
import pytest
from llvmlite import binding as llvm
from onnx import TensorProto, helper

import turnout
from turnout.sdk.semantics import mlas_logistic, mlas_tanh
from turnout.tools.testing import conv_activation_model, onnxruntime_mlas_fma3, provider_session
from turnout_numba.vecmath import (
    exp_f32,
    mlas_logistic_f32,
    mlas_tanh_f32,
    sigmoid_f32,
    tanh_f32,
)

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


def _every(lo: float, hi: float) -> np.ndarray:
    """The bit patterns of every float32 from lo to hi (one sign)."""
    a, b = sorted(int(np.float32(v).view(np.uint32)) for v in (lo, hi))
    return np.arange(a, b + 1, dtype=np.uint32)


def _sample() -> np.ndarray:
    bits = np.arange(0, 2**32, _ALL_BITS_STRIDE, dtype=np.uint64).astype(np.uint32)
    edges = [
        *(_every(s * a, s * b) for a, b in ((17.95, 18.05), (8.97, 9.03)) for s in (1, -1)),
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


_FMA = bool(llvm.get_host_cpu_features().get("fma"))


@pytest.mark.skipif(not _FMA, reason="the host CPU has no FMA for `contract` to use")
@pytest.mark.parametrize(
    ("stmts", "ref"),
    [(mlas_logistic_f32, mlas_logistic), (mlas_tanh_f32, mlas_tanh)],
    ids=["sigmoid", "tanh"],
)
def test_mlas_statements_bit_equal_with_fma(
    sample: np.ndarray, stmts: Callable[[str, str], list[str]], ref: Any
) -> None:
    """Compiled as the provider compiles them (`contract`), onnxruntime's sigmoid and tanh give
    `semantics.mlas_logistic`/`mlas_tanh` on every value (NaN payloads included); with two
    roundings per Horner step they would not."""
    with np.errstate(all="ignore"):
        want = ref(sample).view(np.uint32)
    assert (_run(stmts, sample, contract=True).view(np.uint32) != want).sum() == 0
    assert (_run(stmts, sample, contract=False).view(np.uint32) != want).sum() > 1000


@pytest.mark.parametrize("contract", [False, True], ids=["two-roundings", "fma"])
def test_mlas_statements_accuracy(sample: np.ndarray, contract: bool) -> None:
    """Within 1.7e-7 (sigmoid) and 3e-7 (tanh) of the exact functions, absolute, with FMAs (as
    compiled); 1.8e-7 and 3.3e-7 with two roundings a step. NaN stays."""
    x64 = _f64(sample)
    with np.errstate(all="ignore"):
        exact = {"s": 1.0 / (1.0 + np.exp(-x64)), "t": np.tanh(x64)}
    nan = np.isnan(sample)
    for key, stmts, bound in (("s", mlas_logistic_f32, 1.7e-7), ("t", mlas_tanh_f32, 3e-7)):
        got = _run(stmts, sample, contract)
        np.testing.assert_array_equal(np.isnan(got), nan)
        assert np.abs(got[~nan] - exact[key][~nan]).max() <= bound * (1 if contract else 1.1)


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
    if dtype == np.float32:  # onnxruntime's sigmoid and tanh, to the bit
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(y.view(np.uint32), (x * mlas_logistic(x)).view(np.uint32))
        np.testing.assert_array_equal(t.view(np.uint32), mlas_tanh(x).view(np.uint32))
    else:
        np.testing.assert_allclose(y, want_y, rtol=rtol, atol=1e-30)
        np.testing.assert_allclose(t, np.tanh(x64).astype(dtype), rtol=rtol, atol=1e-30)
    sources = {a.source for a in sess.partition_report().assignments}
    assert sources <= {"fused", "numba"}  # generated kernels, not numpy's


# ---------------------------------------------------------------- beside onnxruntime
def _needs_mlas_fma3() -> None:
    pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")
    if not onnxruntime_mlas_fma3():
        pytest.skip(
            "onnxruntime on this host computes Sigmoid/Tanh otherwise than its x86-64 FMA3 "
            "kernels, which the float32 Sigmoid/Tanh follow"
        )


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def _ops_model(n: int | str) -> onnx.ModelProto:
    """s = Sigmoid(x) and SiLU y = x * s; t = Tanh(-x): over x [n], two groups when fused."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["y"]),
        helper.make_node("Neg", ["x"], ["n"]),
        helper.make_node("Tanh", ["n"], ["t"]),
    ]
    f = TensorProto.FLOAT
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", f, [n])],
        [helper.make_tensor_value_info(o, f, [n]) for o in ("s", "y", "t")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", ["static", "dynamic"])
@pytest.mark.parametrize("fuse", [False, True], ids=["op-by-op", "fused"])
def test_ops_bit_equal_to_onnxruntime(
    sample: np.ndarray, fuse: bool, shape: str, threads: int
) -> None:
    """Sigmoid, Tanh and SiLU on every value of the sample (NaN payloads, +-inf, denormals,
    every float32 around the clamps): onnxruntime's bits, as single-op kernels and as one
    group, of known and of run-time shapes, serial and parallel (8.5M elements: over
    `SERIAL_WORK`)."""
    _needs_mlas_fma3()
    model = _ops_model(sample.size if shape == "static" else "n")
    sess = provider_session(
        model, "NumbaExecutionProvider", intra_op_num_threads=threads, fuse=fuse
    )
    sources = {a.source.split()[0] for a in sess.partition_report().assignments}
    assert sources == ({"fused"} if fuse else {"numba"})
    got = sess.run(None, {"x": sample})
    want = _onnxruntime(model, {"x": sample})
    for name, g, w in zip("syt", got, want):
        assert (g.view(np.uint32) != w.view(np.uint32)).sum() == 0, name


def _conv_act_model(act: str, depthwise: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A Conv whose output is its input exactly (identity 1x1 weights, or a depthwise 3x3 with
    only its centre tap, 1), then `act`: the optimizer folds it into FusedConv, whose epilogue
    applies it."""
    c, h, w = 8, 96, 96  # 73,728 elements: the parallel variants run at 2 threads
    model = conv_activation_model(act, [1, c, h, w], depthwise)
    x = (np.random.default_rng(1).standard_normal((1, c, h, w)) * 8).astype(np.float32)
    x.reshape(-1)[:8] = [17.99, -17.99, 18.5, -30.0, 9.0, -8.999, 1e-40, 3e38]
    return model, {"x": x}


@pytest.mark.usefixtures("conv_kernel_paths")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("depthwise", [False, True], ids=["pointwise", "depthwise"])
@pytest.mark.parametrize("act", ["Sigmoid", "Tanh", "SiLU"])
def test_fused_conv_activation_bit_equal_to_onnxruntime(
    act: str, depthwise: bool, threads: int
) -> None:
    """The Conv epilogue's float32 Sigmoid, Tanh and Swish (SiLU folded) are onnxruntime's
    (whose fused Conv applies MLAS's functions too), on the GEMM and the depthwise kernels."""
    _needs_mlas_fma3()
    model, feeds = _conv_act_model(act, depthwise)
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    ran = {a.op_type: a.source for a in sess.partition_report().assignments}
    assert ran == {"FusedConv": "numba"}
    got = sess.run(None, feeds)[0]
    want = _onnxruntime(model, feeds)[0]
    assert (got.view(np.uint32) != want.view(np.uint32)).sum() == 0
