"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear: official cases, onnxruntime, errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    check_official_case,
    iter_node_cases,
    one_node_model,
    run_own_kernel,
)


def _is_ml(a) -> bool:
    return np.asarray(a).dtype.type.__module__.startswith("ml_dtypes")


def run_ort(node, inputs, opset):
    """Run with onnxruntime; ml_dtypes inputs go in as initializers (ORT cannot feed them)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    model = one_node_model(node, inputs, opset)
    feeds = {}
    for name, v in zip(node.input, inputs):
        if not name:
            continue
        if _is_ml(v):
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(v), name))
            keep = [i for i in model.graph.input if i.name != name]
            del model.graph.input[:]
            model.graph.input.extend(keep)
        else:
            feeds[name] = np.asarray(v)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


CASES = list(iter_node_cases({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official(case):
    check_official_case(case)


QTYPES = {
    "UINT8": np.uint8,
    "INT8": np.int8,
    "UINT16": np.uint16,
    "INT16": np.int16,
    "INT4": ml_dtypes.int4,
    "UINT4": ml_dtypes.uint4,
}


def _params(rng: np.random.Generator, kind: str, shape, axis: int, block: int, qtype):
    """Random scale and zero point for per-tensor / per-axis / blocked quantization."""
    if kind == "tensor":
        pshape: tuple[int, ...] = ()
    elif kind == "axis":
        pshape = (shape[axis],)
    else:
        pshape = tuple(-(-d // block) if i == axis else d for i, d in enumerate(shape))
    scale = rng.uniform(0.02, 0.5, pshape).astype(np.float32)
    info = ml_dtypes.iinfo(qtype)
    zp = rng.integers(int(info.min), int(info.max) + 1, pshape).astype(np.int64).astype(qtype)
    return scale, zp


GRAN = [("tensor", 1, 0), ("axis", 1, 0), ("axis", -1, 0), ("blocked", 1, 2), ("blocked", 2, 3)]


@pytest.mark.parametrize("kind,axis,block", GRAN)
@pytest.mark.parametrize("qname", list(QTYPES))
def test_quantize_against_onnxruntime(qname, kind, axis, block, rng):
    shape = (2, 4, 5)
    x = (rng.normal(0, 4, shape) * 8).astype(np.float32)
    x.flat[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, 1e9]  # ties round to even; saturation
    scale, zp = _params(rng, kind, shape, axis, block, QTYPES[qname])
    if kind == "tensor":
        scale = np.float32(1.0) + scale
    attrs = {"axis": axis, "block_size": block} if block else {"axis": axis}
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], **attrs)
    if qname in ("INT4", "UINT4"):
        # onnxruntime cannot return 4-bit tensors to numpy: quantize to 8 bits there, then
        # saturate to the 4-bit range (clipping twice equals clipping to the narrower range)
        info = ml_dtypes.iinfo(QTYPES[qname])
        wide = zp.astype(np.int8 if qname == "INT4" else np.uint8)
        want = np.clip(run_ort(node, [x, scale, wide], 21)[0], int(info.min), int(info.max))
    else:
        want = run_ort(node, [x, scale, zp], 21)[0]
    got = run_own_kernel(node, [x, scale, zp], 21)[0]
    assert got.dtype == zp.dtype
    np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))
    dq = helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], **attrs)
    want = run_ort(dq, [got, scale, zp], 21)[0]
    back = run_own_kernel(dq, [got, scale, zp], 21)[0]
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, want, rtol=1e-6)


@pytest.mark.parametrize("saturate", [0, 1])
def test_quantize_float8_against_onnxruntime(saturate, rng):
    x = np.concatenate([rng.normal(0, 100, 40), [1e5, -1e5, np.inf, -np.inf, 0]]).astype(np.float32)
    scale = np.float32(0.5)
    zp = np.zeros((), ml_dtypes.float8_e4m3fn)
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], saturate=saturate)
    want = run_ort(node, [x, scale, zp], 21)[0].view(ml_dtypes.float8_e4m3fn)
    got = run_own_kernel(node, [x, scale, zp], 21)[0]
    assert got.dtype == want.dtype
    g, w = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    np.testing.assert_array_equal(g[~np.isnan(g)], w[~np.isnan(w)])


def test_quantize_float16_input_and_output_dtype(rng):
    x = rng.normal(0, 10, (3, 8)).astype(np.float16)
    scale = np.float16(0.25)
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=T.INT8)
    want = run_ort(node, [x, scale], 21)[0]
    got = run_own_kernel(node, [x, scale], 21)[0]
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)
    dq = helper.make_node("DequantizeLinear", ["q", "s"], ["y"])
    back = run_own_kernel(dq, [got, scale], 21)[0]
    assert back.dtype == np.float16
    np.testing.assert_array_equal(back, run_ort(dq, [got, scale], 21)[0])


def test_quantize_opset10_per_tensor(rng):
    x = rng.normal(0, 10, (3, 8)).astype(np.float32)
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"])
    ins = [x, np.float32(0.3), np.uint8(100)]
    np.testing.assert_array_equal(run_own_kernel(node, ins, 10)[0], run_ort(node, ins, 10)[0])
    dq = helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"])
    q = np.arange(24, dtype=np.int32).reshape(3, 8) * 1000
    ins = [q, np.float32(0.3), np.int32(0)]
    np.testing.assert_allclose(run_own_kernel(dq, ins, 10)[0], run_ort(dq, ins, 10)[0])


@pytest.mark.parametrize("seed", range(4))
def test_dynamic_quantize_against_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(seed - 1.5, 3, (4, 7)).astype(np.float32)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"])
    got = run_own_kernel(node, [x], 11)
    want = run_ort(node, [x], 11)
    assert [g.dtype for g in got] == [np.uint8, np.float32, np.uint8]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    np.testing.assert_array_equal(got[2], want[2])
    assert np.abs(got[0].astype(int) - want[0].astype(int)).max() <= 1  # scale rounding ties


def test_dynamic_quantize_all_zero():
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"])
    y, s, zp = run_own_kernel(node, [np.zeros((2, 3), np.float32)], 11)
    want = run_ort(node, [np.zeros((2, 3), np.float32)], 11)
    np.testing.assert_array_equal(y, want[0])
    assert s == want[1] and zp == want[2]


def test_errors():
    x = np.ones((2, 3), np.float32)
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=1)
    with pytest.raises(InvalidArgument, match="per-axis"):
        run_own_kernel(node, [x, np.ones(2, np.float32), np.zeros(2, np.uint8)], 21)
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=1, block_size=2)
    with pytest.raises(InvalidArgument, match="blocked"):
        run_own_kernel(node, [x, np.ones((2, 1), np.float32), np.zeros((2, 1), np.uint8)], 21)
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], output_dtype=T.INT8)
    with pytest.raises(InvalidArgument, match="output_dtype"):
        run_own_kernel(node, [x, np.float32(1), np.uint8(0)], 21)
    node = helper.make_node("DequantizeLinear", ["x", "s", "zp"], ["y"], axis=5)
    with pytest.raises(InvalidArgument, match="axis"):
        run_own_kernel(
            node, [x.astype(np.uint8), np.ones(3, np.float32), np.zeros(3, np.uint8)], 21
        )
