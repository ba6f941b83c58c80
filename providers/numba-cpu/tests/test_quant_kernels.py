"""numba integer kernels: MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv, every
uint8/int8 mix, zero points and scales per tensor, per row of A, per column of B and per output
channel, constant (packed once) and fed weights, N-D A and batched B; convolutions with strides,
dilations, pads, auto_pad, groups, 1-D and 2-D.

The int32 ops are held bit-exact to onnx.reference; the requantizing ones bit-exact to
onnxruntime (whose requantization the kernels follow; where onnxruntime has no kernel for a
type mix, to its formula written out) and within one quantization step of onnx.reference
(which rounds a float64 product).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import cpu_session, onnxruntime_exact_8bit, provider_session

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for requantization")


@pytest.fixture(params=["vnni", "int16"])
def gemm_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both integer GEMMs: the VNNI tiles (where the host has them) and the int16 kernel."""
    from turnout_numba.kernels import quant_conv, quant_matmul, quant_vnni

    if request.param == "vnni" and not quant_vnni.AVAILABLE:
        pytest.skip("this host has no AVX-512 VNNI (or numba compiles for another CPU)")
    if request.param == "int16":
        monkeypatch.setattr(quant_matmul, "VNNI", False)
        monkeypatch.setattr(quant_conv, "VNNI", False)
    return str(request.param)


MIXES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.uint8), (np.int8, np.int8)]


def _ints(rng: np.random.Generator, dt: Any, shape: Any) -> np.ndarray:
    info = np.iinfo(dt)
    return np.asarray(rng.integers(info.min, info.max, shape, endpoint=True), dtype=dt)


def _model(
    op: str, feeds: dict[str, Any], const: tuple[str, ...], out: int, opset: int = 21
) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype
    names = [n if v is not None else "" for n, v in feeds.items()]
    g = helper.make_graph(
        [helper.make_node(op, names, ["y"], name=f"my_{op.lower()}")],
        "g",
        [helper.make_tensor_value_info(n, elem(v.dtype), list(v.shape))
         for n, v in feeds.items() if v is not None and n not in const],
        [helper.make_tensor_value_info("y", out, None)],
        [numpy_helper.from_array(np.asarray(feeds[n]), n) for n in const if feeds[n] is not None],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _live(model: onnx.ModelProto, feeds: dict[str, Any]) -> dict[str, Any]:
    return {i.name: np.asarray(feeds[i.name]) for i in model.graph.input}


def _reference(model: onnx.ModelProto, feeds: dict[str, Any]) -> np.ndarray:
    outs: Any = ReferenceEvaluator(model).run(None, _live(model, feeds))
    return np.asarray(outs[0])


def _numba(model: onnx.ModelProto, feeds: dict[str, Any], threads: int = 1) -> np.ndarray:
    sess: Any = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    got = sess.run(None, _live(model, feeds))[0]
    assert sess.run(None, _live(model, feeds))[0].tobytes() == got.tobytes()
    return np.asarray(got)


def _ort(
    model: onnx.ModelProto, feeds: dict[str, Any], mix: tuple[Any, Any] | None = None
) -> np.ndarray | None:
    """onnxruntime's output, None where it has no kernel for these types or, given the
    product's type `mix`, where its products of that mix are not exact on this host (MLAS's
    uint8 x int8 kernels without VNNI: `onnxruntime_exact_8bit`)."""
    if mix is not None and not onnxruntime_exact_8bit(*mix):
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    try:
        s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except ort.capi.onnxruntime_pybind11_state.NotImplemented:
        return None
    return np.asarray(s.run(None, _live(model, feeds))[0])


def requantized(acc: np.ndarray, mult: np.ndarray, zp: Any, dt: Any) -> np.ndarray:
    """onnxruntime's requantization of int32 sums, written out: float32(acc) * multiplier,
    clamped to the type less the zero point, rounded half to even, plus the zero point."""
    z = np.int32(zp)
    lo, hi = np.iinfo(dt).min - z, np.iinfo(dt).max - z
    v = np.clip(acc.astype(np.int32).astype(np.float32) * mult, np.float32(lo), np.float32(hi))
    return np.asarray(np.rint(v).astype(np.int32) + z, dtype=dt)


def _matmul_formula(feeds: dict[str, Any], ty: Any) -> np.ndarray:
    """QLinearMatMul as onnxruntime computes it, written out over exact sums."""
    f = {k: np.asarray(v) for k, v in feeds.items()}
    acc = (f["a"].astype(np.int64) - f["a_zero_point"]) @ (
        f["b"].astype(np.int64) - f["b_zero_point"]
    )
    mult = f["a_scale"] * f["b_scale"] / f["y_scale"]
    return requantized(acc, mult, f["y_zero_point"], ty)


@pytest.mark.parametrize("seed", range(24))
def test_matmul_integer_random(seed: int, gemm_path: str) -> None:
    rng = np.random.default_rng(seed)
    ta, tb = MIXES[seed % 4]
    m = int(rng.choice([1, 2, 3, 8, 17, 64]))
    k, n = (int(v) for v in rng.integers(1, 300, 2))
    lead = [2] if seed % 5 == 0 else []
    a = _ints(rng, ta, (*lead, m, k))
    b = _ints(rng, tb, (k, n))
    zp_kind = seed % 3  # none, per tensor, per row / per column
    az = bz = None
    if zp_kind == 1:
        az, bz = _ints(rng, ta, ()), _ints(rng, tb, ())
    elif zp_kind == 2:
        az, bz = _ints(rng, ta, (m,)), _ints(rng, tb, (n,))
    feeds = {"a": a, "b": b, "a_zero_point": az, "b_zero_point": bz}
    const = ("b", "b_zero_point") if seed % 2 == 0 else ()
    model = _model("MatMulInteger", feeds, const, onnx.TensorProto.INT32)
    got = _numba(model, feeds, threads=1 + seed % 2)
    assert got.dtype == np.int32
    if az is not None and bz is not None and zp_kind == 2:
        # onnx.reference does not broadcast a per-row zero point: by definition
        want = (a.astype(np.int64) - az.astype(np.int64)[:, None]) @ (
            b.astype(np.int64) - bz.astype(np.int64)
        )
        np.testing.assert_array_equal(got, want.astype(np.int32))
    else:
        want = _reference(model, feeds)
        np.testing.assert_array_equal(got, want)


def test_matmul_integer_batched_b_and_vectors(rng: np.random.Generator) -> None:
    for a_shape, b_shape in [
        ((3, 4, 5), (3, 5, 6)),
        ((5,), (5, 7)),
        ((2, 5), (5,)),
        ((5,), (2, 5, 3)),
    ]:
        a = _ints(rng, np.uint8, a_shape)
        b = _ints(rng, np.int8, b_shape)
        feeds = {"a": a, "b": b, "a_zero_point": np.uint8(9)}
        model = _model("MatMulInteger", feeds, ("a_zero_point",), onnx.TensorProto.INT32)
        want = _reference(model, feeds)
        np.testing.assert_array_equal(_numba(model, feeds), want)


def test_matmul_integer_errors(rng: np.random.Generator) -> None:
    feeds = {"a": _ints(rng, np.uint8, (2, 3)), "b": _ints(rng, np.uint8, (3, 4))}
    model = _model("MatMulInteger", feeds, (), onnx.TensorProto.INT32)
    for i in model.graph.input:  # symbolic dims: the kernel sees the bad shape
        for d, sym in zip(i.type.tensor_type.shape.dim, "mk" if i.name == "a" else "kn"):
            d.dim_param = sym
    sess = provider_session(model, "NumbaExecutionProvider")
    with pytest.raises(InvalidArgument, match="inner dimensions"):
        sess.run(None, {"a": feeds["a"], "b": _ints(rng, np.uint8, (4, 4))})


@pytest.mark.parametrize("seed", range(24))
def test_qlinear_matmul_random(seed: int, gemm_path: str) -> None:
    rng = np.random.default_rng(seed)
    ta, tb = MIXES[seed % 4]
    ty = (np.uint8, np.int8)[seed // 4 % 2]
    m = int(rng.choice([1, 3, 8, 33]))
    k, n = (int(v) for v in rng.integers(1, 300, 2))
    a = _ints(rng, ta, (m, k))
    b = _ints(rng, tb, (k, n))
    per_col = seed % 3 == 2
    b_s = rng.uniform(0.001, 0.02, (n,) if per_col else ()).astype(np.float32)
    b_z = _ints(rng, tb, (n,) if per_col else ())
    if tb == np.int8:
        b_z = np.zeros_like(b_z)  # onnxruntime asks symmetric int8 weights
    feeds = {
        "a": a,
        "a_scale": np.float32(rng.uniform(0.01, 0.05)),
        "a_zero_point": _ints(rng, ta, ()),
        "b": b,
        "b_scale": b_s,
        "b_zero_point": b_z,
        "y_scale": np.float32(rng.uniform(0.05, 0.5) * np.sqrt(k)),
        "y_zero_point": _ints(rng, ty, ()),
    }
    const = tuple(n for n in feeds if n != "a") if seed % 2 == 0 else ("b_scale", "y_scale")
    out = helper.np_dtype_to_tensor_dtype(np.dtype(ty))
    model = _model("QLinearMatMul", feeds, const, out)
    got = _numba(model, feeds, threads=1 + seed % 2)
    assert got.dtype == ty
    want = _ort(model, feeds, (ta, tb))
    if want is None:  # a type mix onnxruntime has no (exact) kernel for: its formula
        want = _matmul_formula(feeds, ty)
    np.testing.assert_array_equal(got, want)
    ref = _reference(model, feeds)
    assert np.abs(got.astype(np.int32) - ref.astype(np.int32)).max() <= 1


@pytest.mark.parametrize("mix", range(4))
def test_batched_qlinear_matmul_attention_shapes(mix: int) -> None:
    """Activations times activations as a quantized transformer's attention has them (per
    head: scores Q.K^T, probabilities times V), batch dims broadcast, every type mix: one call
    of the batched kernel (float32 products where exact, the integer kernel past that),
    bit-equal to onnxruntime (to its formula where it has no kernel)."""
    rng = np.random.default_rng(mix)
    ta, tb = MIXES[mix]
    # (K = 1100 is past float32's exact range for 8-bit products: the integer kernel runs)
    shapes = [
        ((1, 4, 64, 32), (1, 4, 32, 64)),
        ((2, 3, 7, 5), (3, 5, 9)),
        ((2, 3, 1100), (2, 1100, 4)),
    ]
    for a_shape, b_shape in shapes:
        a, b = _ints(rng, ta, a_shape), _ints(rng, tb, b_shape)
        feeds = {
            "a": a, "a_scale": np.float32(0.03), "a_zero_point": _ints(rng, ta, ()),
            "b": b, "b_scale": np.float32(0.02), "b_zero_point": _ints(rng, tb, ()),
            "y_scale": np.float32(rng.uniform(0.2, 0.6) * np.sqrt(a_shape[-1])),
            "y_zero_point": np.uint8(128),
        }  # fmt: skip
        const = tuple(n for n in feeds if n not in ("a", "b"))
        model = _model("QLinearMatMul", feeds, const, onnx.TensorProto.UINT8)
        got = _numba(model, feeds)
        want = _ort(model, feeds, (ta, tb))
        if want is None:
            want = _matmul_formula(feeds, np.uint8)
        np.testing.assert_array_equal(got, want)


def test_qlinear_matmul_saturates(rng: np.random.Generator) -> None:
    """A tiny y_scale drives most outputs to the type's bounds, as onnxruntime does."""
    a = _ints(rng, np.uint8, (4, 64))
    b = _ints(rng, np.int8, (64, 8))
    feeds = {
        "a": a, "a_scale": np.float32(0.1), "a_zero_point": np.uint8(128),
        "b": b, "b_scale": np.float32(0.1), "b_zero_point": np.int8(0),
        "y_scale": np.float32(0.01), "y_zero_point": np.uint8(100),
    }  # fmt: skip
    model = _model("QLinearMatMul", feeds, ("b",), onnx.TensorProto.UINT8)
    got = _numba(model, feeds)
    assert {0, 255} <= set(np.unique(got).tolist())
    want = _ort(model, feeds, (np.uint8, np.int8))
    np.testing.assert_array_equal(got, _matmul_formula(feeds, np.uint8) if want is None else want)


# --------------------------------------------------------------------------------------------
# convolutions

GEOMETRIES: list[dict[str, Any]] = [
    {},
    {"pads": [1, 1, 1, 1]},
    {"strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"strides": [2, 1], "pads": [0, 1, 2, 0], "dilations": [2, 1]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER"},
    {"auto_pad": "VALID", "dilations": [1, 2]},
]


def _conv_model(
    op: str, feeds: dict[str, Any], const: tuple[str, ...], out: int, **attrs: Any
) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype
    names = [n if v is not None else "" for n, v in feeds.items()]
    while names and not names[-1]:
        names.pop()
    g = helper.make_graph(
        [helper.make_node(op, names, ["y"], name=f"my_{op.lower()}", **attrs)],
        "g",
        [helper.make_tensor_value_info(n, elem(np.asarray(v).dtype), list(np.shape(v)))
         for n, v in feeds.items() if v is not None and n not in const],
        [helper.make_tensor_value_info("y", out, None)],
        [numpy_helper.from_array(np.asarray(feeds[n]), n) for n in const if feeds[n] is not None],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _case(seed: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray, dict[str, Any]]:
    """Random x and w (any type mix, groups, kernel sizes) and one of the GEOMETRIES."""
    rng = np.random.default_rng(seed)
    tx, tw = MIXES[seed % 4]
    group = int(rng.choice([1, 1, 2, 4]))
    cg, mg = int(rng.integers(1, 6)), int(rng.integers(1, 5))
    attrs = dict(GEOMETRIES[seed % len(GEOMETRIES)])
    k = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    hw = [int(rng.integers(4, 11)), int(rng.integers(4, 11))]
    if seed % 6 == 5:  # 1-D: the width's attributes
        attrs = {a: ([v[1], v[3]] if a == "pads" else v if a == "auto_pad" else v[1:])
                 for a, v in attrs.items()}  # fmt: skip
        k, hw = k[1:], hw[1:]
    if group > 1:
        attrs["group"] = group
    x = _ints(rng, tx, (int(rng.integers(1, 3)), cg * group, *hw))
    w = _ints(rng, tw, (mg * group, cg, *k))
    return rng, x, w, attrs


@pytest.mark.parametrize("seed", range(28))
def test_conv_integer_random(seed: int, gemm_path: str) -> None:
    rng, x, w, attrs = _case(seed)
    tw = w.dtype
    m = w.shape[0]
    # (onnx.reference broadcasts a per-channel zero point over 2-D kernels only)
    wz = _ints(rng, tw, (m,) if seed % 3 == 2 and w.ndim == 4 else ())
    feeds = {"x": x, "w": w, "x_zero_point": _ints(rng, x.dtype, ()), "w_zero_point": wz}
    const = ("w", "w_zero_point") if seed % 2 == 0 else ()
    model = _conv_model("ConvInteger", feeds, const, onnx.TensorProto.INT32, **attrs)
    got = _numba(model, feeds, threads=1 + seed % 2)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _reference(model, feeds))


@pytest.mark.parametrize("seed", range(28))
def test_qlinear_conv_random(seed: int, gemm_path: str) -> None:
    rng, x, w, attrs = _case(seed)
    tw = w.dtype
    m = w.shape[0]
    ty = (np.uint8, np.int8)[seed // 4 % 2]
    per_ch = seed % 3 == 2
    w_s = rng.uniform(0.005, 0.02, (m,) if per_ch else ()).astype(np.float32)
    # (onnx.reference broadcasts a per-channel zero point over 2-D kernels only)
    wz_shape = (m,) if per_ch and w.ndim == 4 else ()
    wz = np.zeros(wz_shape, tw) if tw == np.int8 else _ints(rng, tw, ())
    feeds = {
        "x": x,
        "x_scale": np.float32(rng.uniform(0.01, 0.05)),
        "x_zero_point": _ints(rng, x.dtype, ()),
        "w": w,
        "w_scale": w_s,
        "w_zero_point": wz,
        "y_scale": np.float32(rng.uniform(0.002, 0.01) * np.sqrt(w[0].size)),
        "y_zero_point": _ints(rng, ty, ()),
        "B": rng.integers(-3000, 3000, (m,)).astype(np.int32) if seed % 2 else None,
    }
    const = tuple(n for n in feeds if n != "x") if seed % 2 == 0 else ("w_scale", "y_scale")
    out = helper.np_dtype_to_tensor_dtype(np.dtype(ty))
    model = _conv_model("QLinearConv", feeds, const, out, **attrs)
    got = _numba(model, feeds, threads=1 + seed % 2)
    assert got.dtype == ty
    want = _ort(model, feeds, (x.dtype.type, tw.type))
    if want is None:  # a type mix onnxruntime has no (exact) kernel for: its formula
        want = _conv_formula(feeds, attrs, ty)
    np.testing.assert_array_equal(got, want)
    if x.ndim == 4 or not per_ch:  # (onnx.reference mis-broadcasts 1-D per-channel scales)
        fed = {n: np.asarray(v) for n, v in feeds.items() if v is not None and n not in const}
        ref: Any = ReferenceEvaluator(model).run(None, fed)
        assert np.abs(got.astype(np.int32) - np.asarray(ref[0]).astype(np.int32)).max() <= 1


def _conv_formula(feeds: dict[str, Any], attrs: dict[str, Any], ty: Any) -> np.ndarray:
    """QLinearConv as onnxruntime computes it, written out over onnx.reference's exact int32
    convolution."""
    f = {k: np.asarray(v) for k, v in feeds.items() if v is not None}
    x, w = f["x"], f["w"]
    zps = {n: f[n] for n in ("x_zero_point", "w_zero_point")}
    acc_model = _conv_model(
        "ConvInteger", {"x": x, "w": w, **zps}, (), onnx.TensorProto.INT32, **attrs
    )
    acc = _reference(acc_model, {"x": x, "w": w, **zps})
    shape = (1, w.shape[0]) + (1,) * (x.ndim - 2)
    if "B" in f:
        acc = acc + f["B"].reshape(shape)
    mult = (f["x_scale"] * f["w_scale"] / f["y_scale"]).astype(np.float32)
    return requantized(acc, mult.reshape(shape) if mult.size > 1 else mult, f["y_zero_point"], ty)


def test_qlinear_conv_resnet_block_layers(rng: np.random.Generator, gemm_path: str) -> None:
    """The shapes the latency table measures (a 3x3 and a 1x1 ResNet layer), u8 x s8 per
    channel, against onnxruntime (its formula where its products are not exact here)."""
    for c, hw, k, pads in [(64, 14, 3, [1, 1, 1, 1]), (128, 7, 1, [0, 0, 0, 0])]:
        x = _ints(rng, np.uint8, (1, c, hw, hw))
        w = _ints(rng, np.int8, (c, c, k, k))
        feeds = {
            "x": x, "x_scale": np.float32(0.02), "x_zero_point": np.uint8(120),
            "w": w, "w_scale": rng.uniform(0.001, 0.003, (c,)).astype(np.float32),
            "w_zero_point": np.zeros(c, np.int8), "y_scale": np.float32(0.3),
            "y_zero_point": np.uint8(110), "B": rng.integers(-900, 900, (c,)).astype(np.int32),
        }  # fmt: skip
        const = tuple(n for n in feeds if n != "x")
        model = _conv_model("QLinearConv", feeds, const, onnx.TensorProto.UINT8, pads=pads)
        want = _ort(model, feeds, (np.uint8, np.int8))
        if want is None:
            want = _conv_formula(feeds, {"pads": pads}, np.uint8)
        np.testing.assert_array_equal(_numba(model, feeds), want)


def test_conv_integer_errors(rng: np.random.Generator) -> None:
    feeds = {"x": _ints(rng, np.uint8, (1, 4, 5, 5)), "w": _ints(rng, np.uint8, (2, 4, 3, 3))}
    model = _conv_model("ConvInteger", feeds, (), onnx.TensorProto.INT32)
    for i in model.graph.input:  # symbolic dims: the kernel sees the bad shape
        for d in i.type.tensor_type.shape.dim:
            d.dim_param = f"{i.name}{id(d)}"
    sess: Any = provider_session(model, "NumbaExecutionProvider")
    with pytest.raises(InvalidArgument, match="do not match group"):
        sess.run(None, {"x": feeds["x"], "w": _ints(rng, np.uint8, (2, 3, 3, 3))})


# ---------------------------------------------------------------------------------------------
# com.microsoft::DynamicQuantizeMatMul: the optimizer's fusion of quantize_dynamic's chains


def _dynamic_models(
    a_shape: tuple[int, ...], w: np.ndarray, w_s: np.ndarray, w_z: np.ndarray, bias: bool
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(the fused one-node model, the unfused chain onnxruntime's quantize_dynamic writes)."""
    fl = onnx.TensorProto.FLOAT
    inits = [numpy_helper.from_array(v, n) for n, v in (("w", w), ("w_s", w_s), ("w_z", w_z))]
    if bias:
        inits.append(numpy_helper.from_array(np.linspace(-1, 1, w.shape[1], dtype=np.float32), "b"))
    io = (
        [helper.make_tensor_value_info("a", fl, list(a_shape))],
        [helper.make_tensor_value_info("y", fl, None)],
    )
    ins = ["a", "w", "w_s", "w_z", "b"] if bias else ["a", "w", "w_s", "w_z"]
    fused = helper.make_graph(
        [helper.make_node("DynamicQuantizeMatMul", ins, ["y"], domain="com.microsoft")],
        "fused", *io, inits,
    )  # fmt: skip
    chain = [
        helper.make_node("DynamicQuantizeLinear", ["a"], ["aq", "as", "az"]),
        helper.make_node("Mul", ["as", "w_s"], ["s"]),
        helper.make_node("MatMulInteger", ["aq", "w", "az", "w_z"], ["yi"]),
        helper.make_node("Cast", ["yi"], ["yf"], to=fl),
        helper.make_node("Mul", ["yf", "s"], ["ys" if bias else "y"]),
    ]
    if bias:
        chain.append(helper.make_node("Add", ["ys", "b"], ["y"]))
    unfused = helper.make_graph(chain, "unfused", *io, inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return (
        helper.make_model(fused, opset_imports=opsets),
        helper.make_model(unfused, opset_imports=opsets[:1]),
    )


@pytest.mark.parametrize("seed", range(12))
def test_dynamic_quantize_matmul(seed: int, gemm_path: str) -> None:
    """Bit-equal to onnxruntime running the unfused chain (same float32 operations; to the
    numpy kernels running it where onnxruntime's products are not exact)."""
    rng = np.random.default_rng(seed)
    wt = (np.int8, np.uint8)[seed % 2]
    k, n = (int(v) for v in rng.integers(1, 200, 2))
    a_shape = (int(rng.choice([1, 3, 8])), k) if seed % 3 else (2, 3, k)
    w = _ints(rng, wt, (k, n))
    per_col = seed % 4 == 3
    w_s = rng.uniform(0.001, 0.01, (n,) if per_col else ()).astype(np.float32)
    w_z = np.zeros((n,) if per_col else (), wt) if wt == np.int8 else _ints(rng, wt, ())
    fused, unfused = _dynamic_models(a_shape, w, w_s, w_z, bias=seed % 2 == 1)
    a = rng.standard_normal(a_shape).astype(np.float32) * np.float32(seed + 1)
    if seed == 5:
        a[...] = 0  # an all-zero input: scale 1, as onnxruntime
    got = _numba(fused, {"a": a}, threads=1 + seed % 2)
    want = _ort(unfused, {"a": a}, (np.uint8, wt))
    if want is None:  # per-column zero points onnxruntime lacks (or inexact): the numpy kernels
        want = np.asarray(cpu_session(unfused).run(None, {"a": a})[0])
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear


def _qdq_model(op: str, x: np.ndarray, scale: np.ndarray, zp: Any, axis: int, out: int) -> Any:
    feeds = {"x": x, "scale": scale, "zp": zp}
    model = _model(op, feeds, ("scale", "zp"), out)
    if axis != 1:
        model.graph.node[0].attribute.append(helper.make_attribute("axis", axis))
    return model


@pytest.mark.parametrize("seed", range(16))
def test_quantize_dequantize_linear(seed: int) -> None:
    """Bit-equal to onnxruntime both ways, per tensor and per axis, uint8 and int8."""
    rng = np.random.default_rng(seed)
    dt = (np.uint8, np.int8)[seed % 2]
    shape = tuple(int(v) for v in rng.integers(2, 7, int(rng.integers(1, 5))))
    axis = int(rng.integers(-len(shape), len(shape)))
    per_axis = seed % 4 >= 2
    n = shape[axis] if per_axis else 1
    scale = rng.uniform(0.005, 0.1, (n,) if per_axis else ()).astype(np.float32)
    zp = _ints(rng, dt, (n,) if per_axis else ())
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    x.reshape(-1)[:2] = [2.5 * float(scale.reshape(-1)[0]), 1e9]  # a tie; a saturating value
    out = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    q = _qdq_model("QuantizeLinear", x, scale, zp, axis, out)
    got = _numba(q, {"x": x})
    assert got.dtype == dt
    np.testing.assert_array_equal(got, _ort(q, {"x": x}))
    dq = _qdq_model("DequantizeLinear", got, scale, zp, axis, onnx.TensorProto.FLOAT)
    back = _numba(dq, {"x": got})
    np.testing.assert_array_equal(back, _ort(dq, {"x": got}))
    np.testing.assert_array_equal(back, _reference(dq, {"x": got}))


@pytest.mark.parametrize("seed", range(6))
def test_dynamic_quantize_linear(seed: int) -> None:
    TP = onnx.TensorProto
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((3, int(rng.integers(1, 40)))) * (seed + 0.5)).astype(np.float32)
    if seed == 1:
        x = np.abs(x)  # the range starts at 0
    if seed == 2:
        x[...] = 0  # scale 1, as onnxruntime
    g = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
        "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, list(x.shape))],
        [
            helper.make_tensor_value_info(n, t, None)
            for n, t in (("y", TP.UINT8), ("s", TP.FLOAT), ("z", TP.UINT8))
        ],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    sess: Any = provider_session(model, "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    so = ort.SessionOptions()
    want = ort.InferenceSession(model.SerializeToString(), so).run(None, {"x": x})
    for g_, w_ in zip(sess.run(None, {"x": x}), want):
        np.testing.assert_array_equal(g_, w_)


@pytest.mark.parametrize("mix", range(4))
def test_pointwise_convolutions(mix: int, gemm_path: str) -> None:
    """1x1 stride-1 convolutions (a plain product on the VNNI path): every mix, a channel
    count that is not whole 4-byte words, two images, per-channel weight zero points."""
    rng = np.random.default_rng(mix)
    tx, tw = MIXES[mix]
    x = _ints(rng, tx, (2, 7, 5, 9))
    w = _ints(rng, tw, (11, 7, 1, 1))
    feeds = {
        "x": x,
        "w": w,
        "x_zero_point": _ints(rng, tx, ()),
        "w_zero_point": _ints(rng, tw, (11,)),
    }
    model = _conv_model("ConvInteger", feeds, ("w", "w_zero_point"), onnx.TensorProto.INT32)
    np.testing.assert_array_equal(_numba(model, feeds), _reference(model, feeds))


# (C, H, W, kernel, strides, pads, depth multiplier): depthwise layers of MobileNet-style
# models (the OCR model's 3x3 at stride 1 and (2, 1), MobileNet's 3x3/5x5 at stride 2) plus
# uneven pads and a depth multiplier of 2
DEPTHWISE = [
    (16, 24, 40, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    (32, 24, 17, (3, 3), (2, 1), (1, 1, 1, 1), 1),
    (24, 14, 14, (3, 3), (2, 2), (0, 0, 1, 1), 1),
    (20, 15, 15, (5, 5), (1, 1), (2, 2, 2, 2), 1),
    (12, 16, 16, (5, 5), (2, 2), (1, 2, 2, 1), 1),
    (6, 9, 11, (3, 3), (1, 1), (1, 1, 1, 1), 2),
]


@pytest.mark.parametrize("case", range(len(DEPTHWISE) * 2))
def test_depthwise_qlinear_conv_against_onnxruntime(
    case: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Depthwise QLinearConv (group == channels) on the direct grouped kernel, bit-equal to
    onnxruntime: u8 x s8 with per-channel scales (what quantize_static emits) and u8 x u8
    with a per-tensor weight zero point, bias, one and two images (to onnxruntime's formula
    where its products are not exact on this host)."""
    from turnout_numba.kernels import quant_grouped

    calls = []
    real = quant_grouped.GroupedConv.__call__
    monkeypatch.setattr(
        quant_grouped.GroupedConv, "__call__", lambda *a: calls.append(1) or real(*a)
    )
    c, h, wd, k, strides, pads, mult = DEPTHWISE[case % len(DEPTHWISE)]
    rng = np.random.default_rng(case)
    tw = (np.int8, np.uint8)[case // len(DEPTHWISE)]
    m = c * mult
    x = _ints(rng, np.uint8, (1 + case % 2, c, h, wd))
    w = _ints(rng, tw, (m, 1, *k))
    per_ch = tw == np.int8
    feeds = {
        "x": x, "x_scale": np.float32(rng.uniform(0.01, 0.05)), "x_zero_point": np.uint8(117),
        "w": w, "w_scale": rng.uniform(0.002, 0.02, (m,) if per_ch else ()).astype(np.float32),
        "w_zero_point": np.zeros(m, np.int8) if per_ch else np.uint8(128),
        "y_scale": np.float32(rng.uniform(0.05, 0.3)), "y_zero_point": np.uint8(100),
        "B": rng.integers(-4000, 4000, (m,)).astype(np.int32),
    }  # fmt: skip
    const = tuple(n for n in feeds if n != "x")
    model = _conv_model(
        "QLinearConv", feeds, const, onnx.TensorProto.UINT8,
        group=c, strides=list(strides), pads=list(pads), kernel_shape=list(k),
    )  # fmt: skip
    got = _numba(model, feeds, threads=1 + case % 2)
    assert calls, "the direct grouped kernel did not run"
    want = _ort(model, feeds, (np.uint8, tw))
    if want is None:  # (a depth multiplier runs onnxruntime's GEMM, inexact here for u8 x s8)
        attrs = {"group": c, "strides": list(strides), "pads": list(pads), "kernel_shape": list(k)}
        want = _conv_formula(feeds, attrs, np.uint8)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("tx", [np.uint8, np.int8])
@pytest.mark.parametrize("cg", [1, 3, 8])
def test_grouped_conv_integer(tx: Any, cg: int) -> None:
    """ConvInteger with groups of 1, 3 and 8 channels (the direct kernel's range), a
    per-channel weight zero point, strides, dilations and uneven pads: exact against
    onnx.reference."""
    rng = np.random.default_rng(cg)
    groups, mg = 4, 2
    x = _ints(rng, tx, (2, groups * cg, 11, 13))
    w = _ints(rng, np.int8, (groups * mg, cg, 3, 3))
    feeds = {"x": x, "w": w, "x_zero_point": _ints(rng, tx, ()), "w_zero_point": None}
    for attrs in (
        {"strides": [2, 1], "pads": [1, 0, 1, 2]},
        {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
        {"pads": [0, 1, 2, 0]},
    ):
        feeds["w_zero_point"] = _ints(rng, np.int8, (groups * mg,))
        model = _conv_model(
            "ConvInteger", feeds, ("w", "w_zero_point"), onnx.TensorProto.INT32,
            group=groups, **attrs,
        )  # fmt: skip
        np.testing.assert_array_equal(_numba(model, feeds), _reference(model, feeds))
