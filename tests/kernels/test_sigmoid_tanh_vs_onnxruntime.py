"""float32 Sigmoid and Tanh bit for bit beside onnxruntime, on the CPU provider's numpy kernels.

onnxruntime computes float32 Sigmoid and Tanh with MLAS's rational approximations
(`turnout.sdk.semantics.mlas_logistic`, `mlas_tanh`), and so do the ops it builds on them: Swish,
com.microsoft QuickGelu, and the Sigmoid/Tanh activations of its fused Conv. turnout's float32
Sigmoid and Tanh are those too, so that a quantized model rounding their outputs to uint8 gets
onnxruntime's codes (tests/quantization/test_dynamic_codes_vs_onnxruntime.py runs such a model).
The bit-equality is checked where this host's onnxruntime computes them that way (its x86-64
kernels with FMA3) and skipped with the reason elsewhere; the accuracy against the exact
functions everywhere. float16 and float64 keep the exact functions. The numba provider's
versions are tested in its own tests (test_numba_vecmath.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from turnout.api.options import SessionOptions
from turnout.api.session import InferenceSession
from turnout.engine.provider_selection import CPU_NUMPY_ONLY_KEY
from turnout.sdk.semantics import logistic, mlas_logistic, mlas_tanh
from turnout.tools.testing import (
    conv_activation_model,
    onnxruntime_mlas_fma3,
    run_onnxruntime,
    run_own_kernel,
)

F32 = np.float32


def _range_bits(lo: float, hi: float) -> np.ndarray:
    """Every float32 from lo to hi, both of one sign."""
    a, b = sorted(int(np.float32(v).view(np.uint32)) for v in (lo, hi))
    return np.arange(a, b + 1, dtype=np.uint32)


def float32_sample() -> np.ndarray:
    """Every 509th float32 bit pattern (8.4M values: NaNs of many payloads, infinities,
    denormals), every float32 around the clamps (+-18 for the sigmoid, +-9 for tanh) and near
    zero, and the special values."""
    dense = np.arange(0, 2**32, 509, dtype=np.uint64).astype(np.uint32)
    near = [
        _range_bits(s * a, s * b)
        for lo_hi in ((17.9, 18.1), (8.95, 9.05), (0.0, 1e-40))
        for a, b in [lo_hi]
        for s in (1, -1)
    ]
    special = np.array(
        [0.0, -0.0, 18, -18, 9, -9, np.inf, -np.inf, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45],
        F32,
    ).view(np.uint32)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FC12345, 0x7FFFFFFF])
    return np.concatenate([dense, *near, special, nans.astype(np.uint32)]).view(F32)


@pytest.fixture(scope="module")
def sample() -> np.ndarray:
    return float32_sample()


def _bits(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def _mismatches(got: Any, want: Any) -> int:
    return int((_bits(got) != _bits(want)).sum())


def _needs_mlas_fma3() -> None:
    pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")
    if not onnxruntime_mlas_fma3():
        pytest.skip(
            "onnxruntime on this host computes Sigmoid/Tanh otherwise than its x86-64 FMA3 "
            "kernels, which turnout's float32 Sigmoid/Tanh follow"
        )


def _numpy_session(model: onnx.ModelProto) -> InferenceSession:
    so = SessionOptions()
    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")
    return InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    ("op", "attrs", "opset"),
    [
        ("Sigmoid", {}, 13),
        ("Tanh", {}, 13),
        ("Swish", {}, 24),
        ("Swish", {"alpha": 1.7}, 24),
        ("QuickGelu", {"alpha": 1.702}, {"": 17, "com.microsoft": 1}),
    ],
)
def test_bit_equal_to_onnxruntime(
    op: str, attrs: dict[str, Any], opset: Any, sample: np.ndarray
) -> None:
    """NaN stays NaN with its payload (quieted), +-inf gives 0/1 and -1/1, denormals and +-0
    give what MLAS's clamped polynomials give: onnxruntime's bits, on every value."""
    _needs_mlas_fma3()
    domain = "com.microsoft" if op == "QuickGelu" else ""
    node = helper.make_node(op, ["x"], ["y"], domain=domain, **attrs)
    want = run_onnxruntime(node, [sample], opset)[0]
    got = run_own_kernel(node, [sample], opset)[0]
    assert got.dtype == F32 and got.shape == sample.shape
    assert _mismatches(got, want) == 0


@pytest.mark.parametrize("act", ["Sigmoid", "Tanh", "SiLU"])
def test_fused_conv_activation_bit_equal(act: str) -> None:
    """turnout's optimizer folds the activation into a FusedConv; its Sigmoid, Tanh and Swish
    are still onnxruntime's."""
    _needs_mlas_fma3()
    import onnxruntime as ort

    model = conv_activation_model(act, [1, 4, 48, 64])
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((1, 4, 48, 64)) * 8).astype(F32)
    x.reshape(-1)[:6] = [17.99, -17.99, 18.5, -30.0, 9.0, 1e-40]
    sess = _numpy_session(model)
    ops = [a.op_type for a in sess.partition_report().assignments]
    assert "FusedConv" in ops and act not in ops
    got = sess.run(None, {"x": x})[0]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    theirs = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert _mismatches(got, theirs.run(None, {"x": x})[0]) == 0


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_dtypes_keep_the_exact_sigmoid(dtype: type) -> None:
    """onnxruntime computes float16 and float64 Sigmoid otherwise than MLAS's float32 kernel:
    turnout keeps its exact, overflow-free sigmoid there."""
    x: np.ndarray = (np.random.default_rng(0).standard_normal(5000) * 12).astype(dtype)
    got = run_own_kernel(helper.make_node("Sigmoid", ["x"], ["y"]), [x], 13)[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, logistic(x))


def test_mlas_functions_near_the_exact_ones(sample: np.ndarray) -> None:
    """MLAS's sigmoid within 1.7e-7 of the exact one and its tanh within 3e-7 (absolute; the
    sigmoid's tail below e^-18 is 0 or a few 1e-8), NaN where the argument is NaN."""
    with np.errstate(all="ignore"):
        x64 = sample.astype(np.float64)
        sig, th = mlas_logistic(sample), mlas_tanh(sample)
        exact_sig, exact_th = 1 / (1 + np.exp(-x64)), np.tanh(x64)
    nan = np.isnan(sample)
    np.testing.assert_array_equal(np.isnan(sig), nan)
    np.testing.assert_array_equal(np.isnan(th), nan)
    assert np.abs(sig[~nan] - exact_sig[~nan]).max() <= 1.7e-7
    assert np.abs(th[~nan] - exact_th[~nan]).max() <= 3e-7
    # at least 0 (MLAS's max), and at most 1 + 2^-23 (reached below 18, in onnxruntime too)
    assert sig[~nan].min() >= 0 and sig[~nan].max() <= np.nextafter(F32(1), F32(2))
