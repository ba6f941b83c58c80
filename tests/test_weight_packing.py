"""onnxruntime's weight-packing helpers (`onnxruntime.capi._pybind_state.quantize_matmul_4bits`,
...) in turnout: byte for byte as onnxruntime 1.32 writes them, and the weights they write run
in a MatMulNBits / MatMulBnb4 model with onnxruntime's outputs."""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.api.capi import _pybind_state as C
from turnout.tools.quantization import weight_packing as W

Array = np.ndarray[Any, Any]

NBITS = ("quantize_matmul_2bits", "quantize_matmul_4bits", "quantize_matmul_8bits")
QDQ = ("quantize_qdq_matmul_2bits", "quantize_qdq_matmul_4bits")
# (K, N): K below, at and past a block size; N odd, even and past a 128-column run
SHAPES = [(1, 1), (17, 3), (20, 4), (33, 7), (64, 8), (130, 5), (257, 2), (5, 259), (300, 131)]
FLOATS = [np.float32, np.float16]


@pytest.fixture(scope="module")
def ort_c() -> ModuleType:
    pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of the byte layouts")
    return importlib.import_module("onnxruntime.capi._pybind_state")


def _weights(shape: tuple[int, int], dtype: Any, seed: int) -> Array:
    """Normal values at a random magnitude, with zeros and exact halves of a step."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape) * rng.choice([0.01, 1.0, 100.0])
    w.reshape(-1)[rng.integers(0, w.size, 3)] = 0
    if w.size > 8:
        w.reshape(-1)[:4] = [0.25, -0.75, 1.5, -2.5]
    out: Array = w.astype(dtype)
    return out


def _outputs(sizes: tuple[int, ...], dtype: Any) -> tuple[Array, Array, Array]:
    """dst, scales and zero points, filled with a pattern so untouched bytes show."""
    dst, n_scales, n_zp = sizes
    return (
        np.full(dst, 0xA5, np.uint8),
        np.full(n_scales + 2, 7, dtype),
        np.full(n_zp + 2, 0x5A, np.uint8),
    )


def _same(ours: tuple[Any, ...], theirs: tuple[Any, ...]) -> None:
    for a, b in zip(ours, theirs, strict=True):
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def _nbits(mod: Any, name: str, w: Array, block: int, symmetric: bool) -> tuple[Array, ...]:
    (k, n), per = w.shape, 8 // int(name[-5])
    blocks = -(-k // block)
    dst, scale, zp = _outputs((n * blocks * block // per, n * blocks, n * blocks), w.dtype)
    dst = dst.reshape(n, blocks, -1)
    getattr(mod, name)(dst, w, scale, zp, block, n, k, symmetric)
    return dst, scale, zp


def _qdq(mod: Any, name: str, w: Array, block: int, symmetric: bool) -> tuple[Array, ...]:
    (k, n), blocks = w.shape, -(-w.shape[0] // block)
    dst, scale, zp = _outputs((-(-k * n // 2) + 1, n * blocks, -(-blocks * n // 2)), w.dtype)
    signed = getattr(mod, name)(dst, w, scale, zp, block, n, k, symmetric)
    return dst, scale, zp, np.array(signed)


def _bnb4(mod: Any, w: Array, block: int, quant_type: int) -> tuple[Array, ...]:
    n, k = w.shape
    dst, absmax, _ = _outputs((-(-n * k // 2) + 1, -(-n * k // block), 0), w.dtype)
    mod.quantize_matmul_bnb4(dst, w, absmax, block, quant_type, n, k)
    return dst, absmax


@pytest.mark.parametrize("name", NBITS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_nbits_bytes_as_onnxruntime(ort_c: ModuleType, name: str, dtype: Any) -> None:
    for (k, n), block, symmetric in itertools.product(SHAPES, [16, 32, 128], [True, False]):
        w = _weights((k, n), dtype, k * n + block)
        _same(_nbits(W, name, w, block, symmetric), _nbits(ort_c, name, w, block, symmetric))


@pytest.mark.parametrize("name", QDQ)
@pytest.mark.parametrize("dtype", FLOATS)
def test_qdq_bytes_as_onnxruntime(ort_c: ModuleType, name: str, dtype: Any) -> None:
    """Both write onnxruntime's 4-bit QDQ layout; the 2-bit one sets lone codes in 2 bits."""
    for (k, n), block, symmetric in itertools.product(SHAPES, [1, 3, 16, 32], [True, False]):
        w = _weights((k, n), dtype, k * n + block)
        _same(_qdq(W, name, w, block, symmetric), _qdq(ort_c, name, w, block, symmetric))


@pytest.mark.parametrize("quant_type", [0, 1])
@pytest.mark.parametrize("dtype", FLOATS)
def test_bnb4_bytes_as_onnxruntime(ort_c: ModuleType, quant_type: int, dtype: Any) -> None:
    for (k, n), block in itertools.product(SHAPES, [16, 64, 256]):
        w = _weights((n, k), dtype, k * n + block)
        _same(_bnb4(W, w, block, quant_type), _bnb4(ort_c, w, block, quant_type))


def test_fp4_moe_packing_as_onnxruntime(ort_c: ModuleType) -> None:
    rng = np.random.default_rng(0)
    for n, k in [(2, 2), (4, 6), (130, 258), (6, 300)]:
        q = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
        ours = W.pack_fp4_weights_for_cuda_moe_gemm(q, n, k)
        assert ours.dtype == np.uint8 and ours.shape == (n * k // 2,)
        assert np.array_equal(ours, ort_c.pack_fp4_weights_for_cuda_moe_gemm(q, n, k))


def test_fp4_moe_packing_is_the_transposed_codes() -> None:
    codes = np.arange(8, dtype=np.uint8).reshape(2, 4)  # [N=2, K=4]
    packed = codes[:, 0::2] | codes[:, 1::2] << 4
    out = W.pack_fp4_weights_for_cuda_moe_gemm(packed, 2, 4)
    assert out.tolist() == [c0 | c1 << 4 for c0, c1 in codes.T.tolist()]


def _error(run: Callable[[Any], Any], mod: Any) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as info:
        run(mod)
    return info.type, str(info.value).strip().splitlines()[-1]


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.quantize_matmul_4bits(*_args(), 24, 3, 20, False),
        lambda m: m.quantize_matmul_8bits(*_args(), 8, 3, 20, True),
        lambda m: m.quantize_qdq_matmul_4bits(*_args(), 0, 3, 20, True),
        lambda m: m.quantize_qdq_matmul_2bits(*_args(), 16, 0, 20, True),
        lambda m: m.quantize_matmul_bnb4(*_args()[:3], 16, 2, 3, 20),
        lambda m: m.quantize_matmul_bnb4(*_args()[:3], 24, 0, 3, 20),
        lambda m: m.quantize_matmul_4bits(*_args(), 16.0, 3, 20, False),
        lambda m: m.quantize_matmul_4bits(*_args(), 16, 3, 20, "yes"),
        lambda m: m.quantize_matmul_4bits(*_args()[:3], None, 16, 3, 20, True),
        lambda m: m.pack_fp4_weights_for_cuda_moe_gemm(np.zeros((3, 3), np.uint8), 3, 6),
        lambda m: m.pack_fp4_weights_for_cuda_moe_gemm(np.zeros((4, 3), np.uint8), -4, 6),
        lambda m: m.pack_fp4_weights_for_cuda_moe_gemm(np.zeros(12, np.uint8), 4, 6),
    ],
)
def test_errors_as_onnxruntime(ort_c: ModuleType, call: Callable[[Any], Any]) -> None:
    ours_type, ours_text = _error(call, W)
    theirs_type, theirs_text = _error(call, ort_c)
    assert ours_type is theirs_type
    if ours_type is not TypeError:  # pybind lists the overloads; ours names the argument
        assert theirs_text.endswith(ours_text)


def _args() -> tuple[Array, Array, Array, Array]:
    return (
        np.zeros((3, 2, 8), np.uint8),
        np.ones((20, 3), np.float32),
        np.zeros(6, np.float32),
        np.zeros(6, np.uint8),
    )


def test_shapes_where_onnxruntime_writes_nothing(ort_c: ModuleType) -> None:
    for mod in (W, ort_c):
        dst, scale, zp = _outputs((8, 4, 4), np.float32)
        mod.quantize_matmul_4bits(dst, np.ones(4, np.float32), scale, zp, 16, 0, 4, False)
        mod.quantize_matmul_bnb4(dst, np.ones(4, np.float32), scale, 16, 0, 4, -1)
        assert (dst == 0xA5).all() and (scale == 7).all() and (zp == 0x5A).all()


def test_outputs_that_would_be_lost_are_refused() -> None:
    """onnxruntime's bindings would write a converted copy of these and drop it."""
    dst, src, scale, zp = _args()
    with pytest.raises(TypeError, match="scale must be a numpy array of float32"):
        W.quantize_matmul_4bits(dst, src, scale.astype(np.float64), zp, 16, 3, 20, False)
    with pytest.raises(TypeError, match="dst must be a numpy array of uint8"):
        W.quantize_matmul_4bits(dst.astype(np.int8), src, scale, zp, 16, 3, 20, False)
    with pytest.raises(ValueError, match="dst holds 47 values, 48 are written"):
        W.quantize_matmul_4bits(dst.reshape(-1)[:47], src, scale, zp, 16, 3, 20, False)
    with pytest.raises(ValueError, match="writeable C-contiguous"):
        W.quantize_matmul_4bits(dst.T, src, scale, zp, 16, 3, 20, False)


def test_names_are_mirrored_where_onnxruntime_has_them() -> None:
    from turnout.api.capi import onnxruntime_pybind11_state as native

    for name in W.__all__:
        assert getattr(C, name) is getattr(W, name) is getattr(native, name)
    with pytest.raises(AttributeError, match="_pybind_state' has no attribute 'nope'"):
        _ = C.nope


# ---- the packed weights run ----


def _nbits_model(n: int, k: int, block: int, bits: int, b: Array, scales: Array, zp: Any) -> Any:
    inits = [
        onnx.numpy_helper.from_array(b, "B"),
        onnx.numpy_helper.from_array(scales.reshape(n, -1), "scales"),
    ]
    inputs = ["A", "B", "scales"]
    if zp is not None:
        inits.append(onnx.numpy_helper.from_array(zp, "zp"))
        inputs.append("zp")
    node = helper.make_node(
        "MatMulNBits", inputs, ["Y"], domain="com.microsoft", K=k, N=n, bits=bits,
        block_size=block,
    )  # fmt: skip
    dtype = TensorProto.FLOAT16 if scales.dtype == np.float16 else TensorProto.FLOAT
    graph = helper.make_graph(
        [node],
        "nbits",
        [helper.make_tensor_value_info("A", dtype, ["M", k])],
        [helper.make_tensor_value_info("Y", dtype, ["M", n])],
        inits,
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _run_both(model: Any, feeds: dict[str, Array]) -> tuple[Array, Array]:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime runs the same model")
    data = model.SerializeToString()
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ours = turnout.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return ours, theirs


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_nbits_runs_the_packed_weights(bits: int, symmetric: bool, dtype: Any) -> None:
    k, n, block = 72, 10, 32  # K not a multiple of the block
    w = _weights((k, n), np.float32, 7)
    blocks = -(-k // block)
    b = np.zeros((n, blocks, block * bits // 8), np.uint8)
    scales = np.zeros(n * blocks, dtype)
    zp = np.zeros(n * -(-blocks // (8 // bits)), np.uint8)
    getattr(C, f"quantize_matmul_{bits}bits")(
        b, w.astype(dtype), scales, zp, block, n, k, symmetric
    )
    model = _nbits_model(n, k, block, bits, b, scales, None if symmetric else zp.reshape(n, -1))
    a = np.random.default_rng(1).standard_normal((3, k)).astype(dtype)
    ours, theirs = _run_both(model, {"A": a})
    tol = 1e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol * np.abs(theirs).max())


@pytest.mark.parametrize("quant_type", [0, 1])
def test_matmul_bnb4_runs_the_packed_weights(quant_type: int) -> None:
    k, n, block = 40, 6, 64  # N * K not a multiple of the block
    w = _weights((n, k), np.float32, 3)
    b = np.zeros((n * k + 1) // 2, np.uint8)
    absmax = np.zeros(-(-n * k // block), np.float32)
    C.quantize_matmul_bnb4(b, w, absmax, block, quant_type, n, k)
    node = helper.make_node(
        "MatMulBnb4", ["A", "B", "absmax"], ["Y"], domain="com.microsoft", K=k, N=n,
        block_size=block, quant_type=quant_type,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "bnb4",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, n])],
        [onnx.numpy_helper.from_array(b, "B"), onnx.numpy_helper.from_array(absmax, "absmax")],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    a = np.random.default_rng(2).standard_normal((2, k)).astype(np.float32)
    ours, theirs = _run_both(model, {"A": a})
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())
