"""NaN and infinities through quantization give onnxruntime's codes on every CPU tier.

DynamicQuantizeLinear leaves NaNs out of its range and quantizes them to 0 (the range of
[nan, 1, 2] is [0, 2]); a range from -inf has zero point 255; QuantizeLinear sends NaN to the
lowest code of its type. Before: the numpy kernels took NaN as the range (scale NaN, every code
0) and numba's DynamicQuantizeLinear raised on a NaN zero point; QuantizeLinear gave NaN the
zero point. Where onnxruntime's own answer depends on where a NaN sits in its vector lanes (a
long run of NaNs), no case is asserted."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.sdk.semantics.quant import dynamic_quant_params, dynamic_quant_range

NAN, INF = np.nan, np.inf
RANGES = [
    [NAN, 1.0, 2.0],
    [1.0, NAN, 2.0],
    [1.0, 2.0, NAN],
    [INF, 1.0, 2.0],
    [-INF, 1.0, 2.0],
    [*np.arange(1.0, 17.0), NAN, -3.0],
    [NAN] * 5,
]
TIERS = {  # session config entries of each CPU tier
    "numpy": {"session.turnout.cpu_numpy_only": "1"},
    "compiled": {"session.turnout.wait_for_compiled_tier": "1"},
}


def _model(node: Any, inits: list[Any], opset: int) -> bytes:
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_empty_tensor_value_info(o) for o in node.output],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _both(model: bytes, x: np.ndarray, tier: str) -> tuple[list[Any], list[Any]]:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    expected = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    tso = turnout.SessionOptions()
    for key, value in TIERS[tier].items():
        tso.add_session_config_entry(key, value)
    sess = turnout.InferenceSession(model, tso, providers=["CPUExecutionProvider"])
    return expected, sess.run(None, {"x": x})


@pytest.mark.parametrize("tier", list(TIERS))
@pytest.mark.parametrize("values", RANGES, ids=range(len(RANGES)))
def test_dynamic_quantize_linear_with_nan_and_inf(tier: str, values: list[float]) -> None:
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])
    x = np.array(values, np.float32)
    expected, got = _both(_model(node, [], 17), x, tier)
    for want, have in zip(expected, got):
        np.testing.assert_array_equal(np.asarray(have), np.asarray(want))


@pytest.mark.parametrize("tier", list(TIERS))
@pytest.mark.parametrize(("dtype", "zero_point"), [(np.uint8, 10), (np.int8, -3)])
def test_quantize_linear_sends_nan_to_the_lowest_code(
    tier: str, dtype: type[Any], zero_point: int
) -> None:
    inits = [
        numpy_helper.from_array(np.array(0.1, np.float32), "s"),
        numpy_helper.from_array(np.array(zero_point, dtype), "z"),
    ]
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    x = np.array([NAN, 1.0, -1.0, INF, -INF] + [NAN] * 20, np.float32)  # vector and tail paths
    (want,), (have,) = _both(_model(node, inits, 19), x, tier)
    np.testing.assert_array_equal(have, want)
    assert have[0] == np.iinfo(dtype).min


def test_the_shared_rule() -> None:
    assert dynamic_quant_range(np.array([NAN, 1, 2], np.float32)) == (1, 2)
    assert dynamic_quant_range(np.array([NAN, NAN], np.float32)) == (0, 0)
    assert dynamic_quant_range(np.zeros(0, np.float32)) == (0, 0)
    assert dynamic_quant_params(-INF, 2.0) == (INF, 255)  # -inf / inf: onnxruntime's 255
