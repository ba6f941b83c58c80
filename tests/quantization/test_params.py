"""Scales, zero points and quantized weights against onnxruntime.quantization's arithmetic (the
oracle the output format must match), and the invariants that hold without it."""

from __future__ import annotations

import numpy as np
import pytest

from turnout.tools.quantization.params import params_for_range, quantize_bias, quantize_weight
from turnout.tools.quantization.types import QuantType, quant_range


@pytest.mark.parametrize("qtype", [QuantType.QInt8, QuantType.QUInt8])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("reduce_range", [False, True])
def test_weight_quantization_matches_onnxruntime(
    rng: np.random.Generator, qtype: QuantType, symmetric: bool, reduce_range: bool
) -> None:
    qu = pytest.importorskip("onnxruntime.quantization.quant_utils", reason="oracle: onnxruntime")
    ort_type = {QuantType.QInt8: qu.QuantType.QInt8, QuantType.QUInt8: qu.QuantType.QUInt8}[qtype]
    for shift in (0.0, 0.7, -0.9):
        w = (rng.standard_normal((6, 5)) + shift).astype(np.float32)
        q, params = quantize_weight(w, qtype, symmetric, reduce_range=reduce_range)
        zero, scale, expected = qu.quantize_data(
            w, ort_type.tensor_type, symmetric, reduce_range=reduce_range
        )
        np.testing.assert_allclose(params.scale, scale, rtol=1e-6)
        assert int(params.zero_point) == int(zero)
        np.testing.assert_array_equal(q, expected)


@pytest.mark.parametrize("qtype", [QuantType.QInt8, QuantType.QUInt8])
@pytest.mark.parametrize("symmetric", [False, True])
def test_zero_is_exact_and_range_is_covered(
    rng: np.random.Generator, qtype: QuantType, symmetric: bool
) -> None:
    for lo, hi in rng.normal(size=(20, 2)) * 5:
        lo, hi = min(lo, hi), max(lo, hi)
        p = params_for_range(lo, hi, qtype, symmetric)
        qmin, qmax = quant_range(qtype, symmetric)
        assert qmin <= int(p.zero_point) <= qmax  # 0.0 maps to an integer exactly
        half = p.scale / 2 * (1 + 1e-4)  # rounding the zero point shifts the grid by <= 1/2
        assert (qmin - int(p.zero_point)) * p.scale <= min(lo, 0) + half
        assert (qmax - int(p.zero_point)) * p.scale >= max(hi, 0) - half


def test_per_channel_scales_follow_each_channel(rng: np.random.Generator) -> None:
    w = (
        rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        * np.array([1, 10, 0.1, 0])[:, None, None, None]
    )
    q, params = quantize_weight(w.astype(np.float32), QuantType.QInt8, True, axis=0)
    assert params.axis == 0 and params.scale.shape == (4,)
    back = q.astype(np.float32) * params.scale[:, None, None, None]
    for c in range(4):  # each channel is within half a step of its own scale
        assert np.abs(back[c] - w[c]).max() <= params.scale[c] / 2 + 1e-7
    assert params.scale[3] == 1.0 and not q[3].any()  # an all-zero channel: scale 1, zeros


def test_bias_is_int32_at_the_product_scale(rng: np.random.Generator) -> None:
    bias = rng.standard_normal(5).astype(np.float32)
    scale = np.full(5, 0.003, np.float32)
    q, params = quantize_bias(bias, scale)
    assert q.dtype == np.int32 and params.axis == 0 and not params.zero_point.any()
    assert np.abs(q * scale - bias).max() <= 0.0015 + 1e-7
