"""Cast and CastLike: official node cases, onnxruntime / onnx.reference comparisons, errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from turnout.graph.dtypes import np_dtype
from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    check_official_case,
    iter_node_cases,
    run_onnxruntime,
    run_own_kernel,
    run_reference,
)

CASES = list(iter_node_cases({"Cast", "CastLike"}))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official(case):
    check_official_case(case)


def _same_bits(got, want):
    """Equal values, dtype and shape; NaNs equal whatever their sign or payload."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    if got.dtype == object:
        assert got.tolist() == want.tolist()
        return
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    m = ~np.isnan(g)
    np.testing.assert_array_equal(g[m], w[m])
    if got.dtype.kind == "f" or got.dtype.kind == "V":
        np.testing.assert_array_equal(np.signbit(g[m]), np.signbit(w[m]))


# drawn once at import from a fixed seed of its own: the same values whatever tests run
_FLOATS = np.concatenate(
    [
        np.random.default_rng(1).normal(0, 40, 60),
        [0.0, -0.0, 0.5, 1.5, 2.5, -2.5, 127.4, -100.6, 1e-7, -1e-7],
    ]
)
# (not 480..496: onnxruntime truncates those to 448 without saturation; the spec says NaN)
_SPECIAL = np.array([np.nan, np.inf, -np.inf, 1e6, -1e6, 1e30, 460.0, 464.0, 470.0, -500.0])
STD = [
    "FLOAT",
    "DOUBLE",
    "FLOAT16",
    "INT8",
    "UINT8",
    "INT16",
    "UINT16",
    "INT32",
    "UINT32",
    "INT64",
    "UINT64",
    "BOOL",
]


def _sample(src: str, dst: str) -> np.ndarray:
    """Inputs of `src` whose conversion to `dst` ONNX defines (no float -> int overflow)."""
    dt = np_dtype(getattr(T, src))
    vals = _FLOATS
    if dst not in ("FLOAT", "DOUBLE", "FLOAT16", "BOOL", "STRING", "BFLOAT16") and src in (
        "FLOAT",
        "DOUBLE",
        "FLOAT16",
        "BFLOAT16",
    ):
        ddt = np_dtype(getattr(T, dst))
        if ddt.kind in "iu":  # float -> int is only defined in range
            info = np.iinfo(ddt)
            vals = np.clip(vals, info.min, min(info.max, 60000))
    elif src in ("FLOAT", "DOUBLE") and dst not in ("FLOAT16",):
        vals = np.concatenate([vals, _SPECIAL])
    if src == "BOOL":
        return vals > 0
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.clip(np.round(vals * 3), info.min, info.max).astype(dt)
    return vals.astype(dt)


@pytest.mark.parametrize("src", STD)
def test_against_onnxruntime(src):
    for dst in [*STD, "STRING"]:
        x = _sample(src, dst)
        node = helper.make_node("Cast", ["x"], ["y"], to=getattr(T, dst))
        _same_bits(run_own_kernel(node, [x], 21)[0], run_onnxruntime(node, [x], 21)[0])


@pytest.mark.parametrize("src", ["FLOAT", "DOUBLE", "FLOAT16"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_float8_against_onnxruntime(src, saturate):
    with np.errstate(over="ignore"):
        x = np.concatenate([_FLOATS, _SPECIAL]).astype(np_dtype(getattr(T, src)))
    node = helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT8E4M3FN, saturate=saturate)
    want = run_onnxruntime(node, [x], 21)[0].view(ml_dtypes.float8_e4m3fn)
    _same_bits(run_own_kernel(node, [x], 21)[0], want)


def test_strings_against_onnxruntime():
    s = np.array(["1.5", "-2", "1e3", "+INF", "-inf", "NaN", "nan", "inf", "0", "7E-2"], object)
    for dst in ("FLOAT", "DOUBLE"):
        node = helper.make_node("Cast", ["x"], ["y"], to=getattr(T, dst))
        _same_bits(run_own_kernel(node, [s], 21)[0], run_onnxruntime(node, [s], 21)[0])
    ints = np.array(["100", "-5", "7", "0"], object)
    for dst in ("INT64", "INT32", "INT8", "UINT16"):
        node = helper.make_node("Cast", ["x"], ["y"], to=getattr(T, dst))
        _same_bits(run_own_kernel(node, [ints], 21)[0], run_onnxruntime(node, [ints], 21)[0])


ML = ["BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "INT4", "UINT4"]


def _exotic_input(src: str, dst: str) -> np.ndarray:
    """Inputs of `src` for a conversion to `dst`, leaving out what ONNX leaves undefined."""
    dt = np_dtype(getattr(T, src))
    if src in ("INT4", "UINT4"):
        info = ml_dtypes.iinfo(dt)
        return np.arange(int(info.min), int(info.max) + 1).astype(dt)
    if dt.kind in "iub":
        return _sample(src, dst)
    vals = np.concatenate([_FLOATS, _SPECIAL])
    with np.errstate(over="ignore"):
        x = vals.astype(dt)
    ddt = np_dtype(getattr(T, dst))
    if ddt.kind in "iu" or dst in ("INT4", "UINT4"):  # float -> int is defined in range only
        f = x.astype(np.float32)
        lim = 100 if ddt.itemsize == 1 else 1000
        keep = np.isfinite(f) & (np.abs(f) < lim)
        if dst.startswith("U"):
            keep &= f >= 0
        x = x[keep]
    return x


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("exotic", ML)
def test_exotic_types_against_reference(exotic, saturate):
    """ml_dtypes types both ways, against onnx.reference (onnxruntime cannot feed them)."""
    for other in ["FLOAT", "DOUBLE", "FLOAT16", "INT8", "INT32", "UINT8", "INT64", *ML]:
        for src, dst in ((other, exotic), (exotic, other)):
            if {src, dst} == {"INT4", "UINT4"}:
                continue  # onnx.reference cannot cast between these; see test_int4_uint4
            x = _exotic_input(src, dst)
            node = helper.make_node("Cast", ["x"], ["y"], to=getattr(T, dst), saturate=saturate)
            with np.errstate(all="ignore"):
                want = run_reference(node, [x], 21)[0]
            _same_bits(run_own_kernel(node, [x], 21)[0], want)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("src", ["FLOAT", "FLOAT16", "BFLOAT16"])
def test_e8m0_round_modes(src, saturate, round_mode):
    x = np.abs(np.concatenate([_FLOATS, [np.nan, np.inf, 3e38, 1e-38, 0.75, 1.5, 3.0]]))
    with np.errstate(over="ignore"):
        x = x.astype(np_dtype(getattr(T, src)))
    node = helper.make_node(
        "Cast", ["x"], ["y"], to=T.FLOAT8E8M0, saturate=saturate, round_mode=round_mode
    )
    want = numpy_helper.to_float8e8m0(x.astype(np.float32), bool(saturate), round_mode)
    _same_bits(run_own_kernel(node, [x], 25)[0], want)


def test_int4_uint4():
    """int4 <-> uint4 keeps the low 4 bits, like the wider integer casts."""
    for src, dst, wide in (("INT4", "UINT4", np.int8), ("UINT4", "INT4", np.uint8)):
        x = _exotic_input(src, dst)
        node = helper.make_node("Cast", ["x"], ["y"], to=getattr(T, dst))
        want = (x.astype(wide).astype(np.int64) & 15).astype(np.int8)
        if dst == "INT4":
            want = np.where(want > 7, want - 16, want)
        _same_bits(run_own_kernel(node, [x], 21)[0], want.astype(np_dtype(getattr(T, dst))))


@pytest.mark.parametrize("dst", ["INT4", "UINT4", "INT2", "UINT2"])
@pytest.mark.parametrize("src", ["FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16"])
def test_float_to_subbyte_out_of_range_is_zero(src, dst):
    """Floats into 2/4-bit ints truncate toward zero, and what falls outside the type (NaN and
    the infinities too) becomes 0, as the node tests pin it; the same with every ml_dtypes."""
    info = ml_dtypes.iinfo(np_dtype(getattr(T, dst)))
    lo, hi = int(info.min), int(info.max)
    vals = np.concatenate(
        [np.arange(-20, 21) / 2, [lo - 1, hi + 1, lo - 0.5, hi + 0.99, 1e10, -1e10]]
    )
    vals = np.concatenate([vals, [np.nan, np.inf, -np.inf]])
    with np.errstate(over="ignore"):
        x = vals.astype(np_dtype(getattr(T, src)))
    node = helper.make_node("Cast", ["x"], ["y"], to=getattr(T, dst))
    got = run_own_kernel(node, [x], 21)[0]
    want = []
    for v in x.astype(np.float64).tolist():
        t = int(np.trunc(v)) if np.isfinite(v) else None
        want.append(t if t is not None and lo <= t <= hi else 0)
    _same_bits(got, np.array(want, np.int8).astype(got.dtype))
    assert got.dtype == np_dtype(getattr(T, dst))


def test_castlike_uses_second_input_type():
    x = _FLOATS.astype(np.float32)
    for like in (np.zeros(1, np.int16), np.zeros(2, np.float16), np.zeros(1, ml_dtypes.bfloat16)):
        node = helper.make_node("CastLike", ["x", "like"], ["y"])
        cast = helper.make_node(
            "Cast", ["x"], ["y"], to=onnx.helper.np_dtype_to_tensor_dtype(like.dtype)
        )
        _same_bits(run_own_kernel(node, [x, like], 21)[0], run_own_kernel(cast, [x], 21)[0])


def test_cast1_type_name():
    x = _FLOATS.astype(np.float32)
    old = helper.make_node("Cast", ["x"], ["y"], to="INT32")
    new = helper.make_node("Cast", ["x"], ["y"], to=T.INT32)
    _same_bits(run_own_kernel(old, [x], 1)[0], run_own_kernel(new, [x], 21)[0])


def test_bad_round_mode():
    node = helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT8E8M0, round_mode="sideways")
    with pytest.raises(InvalidArgument, match="round_mode"):
        run_own_kernel(node, [np.ones(2, np.float32)], 25)


def test_unparsable_string():
    node = helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT)
    with pytest.raises(InvalidArgument, match="cannot convert"):
        run_own_kernel(node, [np.array(["1", "Hello"], object)], 21)
