"""com.microsoft QuantizeLinear and DequantizeLinear against onnxruntime's CPU kernels: 8-,
16- and 4-bit types, per tensor and per axis, float and float16 scales, zero points present
and absent. Quantized outputs equal onnxruntime's."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN
from turnout.tools.testing import run_reference

CODES = [np.uint8, np.int8, np.uint16, np.int16, ml_dtypes.int4, ml_dtypes.uint4]
SHAPE = (2, 3, 4)


def _bounds(dt: Any) -> tuple[int, int]:
    if dt in (ml_dtypes.int4, ml_dtypes.uint4):
        return (-8, 7) if dt == ml_dtypes.int4 else (0, 15)
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


def _params(
    rng: np.random.Generator, dt: Any, axis: int | None, float_dt: Any
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    shape = () if axis is None else (SHAPE[axis],)
    lo, hi = _bounds(dt)
    scale = rng.uniform(0.01, 0.2, shape).astype(float_dt)
    zp = rng.integers(lo // 2, hi // 2 + 1, shape).astype(dt)
    return scale, zp, {} if axis is None else {"axis": axis}


@pytest.mark.parametrize("float_dt", [np.float32, np.float16])
@pytest.mark.parametrize("axis", [None, 1, -1])
@pytest.mark.parametrize("dt", CODES, ids=lambda t: np.dtype(t).name)
def test_quantize_linear(
    contrib_parity: Any, rng: np.random.Generator, dt: Any, axis: int | None, float_dt: Any
) -> None:
    scale, zp, attrs = _params(rng, dt, axis, float_dt)
    x = (rng.standard_normal(SHAPE) * 4).astype(float_dt)
    x.flat[:4] = np.array([0.5, 1.5, -2.5, 4e4]) * float(scale.flat[0])  # ties, saturation
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], domain=DOMAIN, **attrs)
    if dt in (ml_dtypes.int4, ml_dtypes.uint4):
        # onnxruntime's Python API returns no int4 arrays: ONNX's QuantizeLinear-21 (in float32,
        # as onnxruntime's contrib kernel computes) run by onnx.reference is the oracle
        onnx_node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)
        wide = [x.astype(np.float32), scale.astype(np.float32), zp]
        want = run_reference(onnx_node, wide, 21)
        contrib_parity(node, [x, scale, zp], reference=lambda *_: want)
        return
    contrib_parity(node, [x, scale, zp])


def test_quantize_linear_without_zero_point(contrib_parity: Any, rng: np.random.Generator) -> None:
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], domain=DOMAIN)
    contrib_parity(
        node, [rng.standard_normal(SHAPE).astype(np.float32), np.array(0.03, np.float32)]
    )


@pytest.mark.parametrize("float_dt", [np.float32, np.float16])
@pytest.mark.parametrize("axis", [None, 0, 2])
@pytest.mark.parametrize("dt", [*CODES, np.int32], ids=lambda t: np.dtype(t).name)
def test_dequantize_linear(
    contrib_parity: Any, rng: np.random.Generator, dt: Any, axis: int | None, float_dt: Any
) -> None:
    if dt == np.int32:  # an int32 bias: zero point 0
        lo, hi = -(1 << 14), 1 << 14  # float16 outputs stay finite
        scale = rng.uniform(0.01, 0.2, () if axis is None else (SHAPE[axis],)).astype(float_dt)
        zp = np.zeros(scale.shape, np.int32)
        attrs: dict[str, Any] = {} if axis is None else {"axis": axis}
    else:
        scale, zp, attrs = _params(rng, dt, axis, float_dt)
        lo, hi = _bounds(dt)
    x = rng.integers(lo, hi, SHAPE, endpoint=True).astype(dt)
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], domain=DOMAIN, **attrs)
    narrow = dt in (ml_dtypes.int4, ml_dtypes.uint4)
    contrib_parity(node, [x, scale, zp], constant={0, 2} if narrow else set())
