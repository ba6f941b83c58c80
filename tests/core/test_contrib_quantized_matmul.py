"""QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul, MatMulNBits and GatherBlockQuantized
(com.microsoft) against onnxruntime's CPU kernels on generated cases.

Quantized outputs equal onnxruntime's; float outputs agree within 0.1% of their range, except
MatMulNBits at accuracy level 4, where onnxruntime quantizes A to int8 too (2%)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN
from turnout.tools.testing import run_onnxruntime


def _q(rng: np.random.Generator, shape: tuple[int, ...], dt: Any) -> np.ndarray:
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dt)


def _f(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _zp(rng: np.random.Generator, dt: Any, shape: tuple[int, ...] = ()) -> np.ndarray:
    lo, hi = (100, 156) if dt == np.uint8 else (-20, 20)
    return rng.integers(lo, hi, size=shape).astype(dt)


def _node(op: str, names: list[str], **attrs: Any) -> Any:
    while names and not names[-1]:
        names = names[:-1]
    return helper.make_node(op, names, ["y"], domain=DOMAIN, **attrs)


def _names(inputs: list[Any]) -> list[str]:
    return ["" if v is None else f"i{i}" for i, v in enumerate(inputs)]


def _present(inputs: list[Any]) -> list[Any]:
    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    return inputs


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("quantized_out", [True, False])
@pytest.mark.parametrize("per_column", [True, False])
@pytest.mark.parametrize("with_c", [True, False])
@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 0), (1, 0), (0, 1)])
@pytest.mark.parametrize(("a_dt", "b_dt"), [(np.uint8, np.int8), (np.uint8, np.uint8)])
def test_qgemm(
    contrib_parity: Any,
    rng: np.random.Generator,
    a_dt: Any,
    b_dt: Any,
    trans_a: int,
    trans_b: int,
    with_c: bool,
    per_column: bool,
    quantized_out: bool,
) -> None:
    m, k, n = 5, 24, 7
    a = _q(rng, (k, m) if trans_a else (m, k), a_dt)
    b = _q(rng, (n, k) if trans_b else (k, n), b_dt)
    b_shape = (n,) if per_column else ()
    b_scale = rng.uniform(0.001, 0.01, b_shape).astype(np.float32)
    b_zp = np.zeros(b_shape, b_dt) if b_dt == np.int8 else _zp(rng, b_dt, b_shape)
    c = rng.integers(-5000, 5000, (n,)).astype(np.int32) if with_c else None
    inputs = [a, np.array(0.02, np.float32), _zp(rng, a_dt), b, np.asarray(b_scale), b_zp, c]
    if quantized_out:
        inputs += [np.array(0.05, np.float32), _zp(rng, np.uint8)]
    node = _node("QGemm", _names(inputs), transA=trans_a, transB=trans_b, alpha=0.75)
    contrib_parity(node, _present(inputs))


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize("per_column", [True, False])
@pytest.mark.parametrize(("a_shape", "b_shape"), [((4, 16), (16, 8)), ((2, 3, 32), (32, 5))])
@pytest.mark.parametrize(("a_dt", "b_dt"), [(np.uint8, np.int8), (np.uint8, np.uint8)])
def test_matmul_integer_to_float(
    contrib_parity: Any,
    rng: np.random.Generator,
    a_dt: Any,
    b_dt: Any,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    per_column: bool,
    with_zp: bool,
    with_bias: bool,
) -> None:
    n = b_shape[-1]
    col = (n,) if per_column else ()
    inputs: list[Any] = [_q(rng, a_shape, a_dt), _q(rng, b_shape, b_dt)]
    inputs += [np.array(0.03, np.float32), rng.uniform(0.001, 0.01, col).astype(np.float32)]
    inputs += [_zp(rng, a_dt), _zp(rng, b_dt, col)] if with_zp else [None, None]
    inputs += [_f(rng, (n,)) if with_bias else None]
    contrib_parity(_node("MatMulIntegerToFloat", _names(inputs)), _present(inputs))


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("per_column", [True, False])
@pytest.mark.parametrize("b_dt", [np.int8, np.uint8])
@pytest.mark.parametrize(("a_shape", "n"), [((4, 16), 8), ((2, 3, 64), 12)])
def test_dynamic_quantize_matmul(
    contrib_parity: Any,
    rng: np.random.Generator,
    a_shape: tuple[int, ...],
    n: int,
    b_dt: Any,
    per_column: bool,
    with_bias: bool,
) -> None:
    col = (n,) if per_column else ()
    b = _q(rng, (a_shape[-1], n), b_dt)
    inputs: list[Any] = [_f(rng, a_shape) + 0.5, b]
    inputs += [rng.uniform(0.001, 0.01, col).astype(np.float32)]
    inputs += [_zp(rng, b_dt, col) if b_dt == np.uint8 else np.zeros(col, b_dt)]
    inputs += [_f(rng, (n,)) if with_bias else None]
    contrib_parity(_node("DynamicQuantizeMatMul", _names(inputs)), _present(inputs))


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes (< 2**bits) packed low bits first along the last axis, as uint8."""
    per = 8 // bits
    grouped = codes.astype(np.uint8).reshape(*codes.shape[:-1], -1, per)
    out = np.zeros(grouped.shape[:-1], np.uint8)
    for j in range(per):
        out |= grouped[..., j] << np.uint8(j * bits)
    return out


def _nbits_inputs(
    rng: np.random.Generator, n: int, k: int, block: int, bits: int, zp: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    blocks = -(-k // block)
    codes = rng.integers(0, 1 << bits, (n, blocks * block))
    b = _pack(codes, bits).reshape(n, blocks, block * bits // 8)
    scales = rng.uniform(0.01, 0.05, (n, blocks)).astype(np.float32)
    if zp == "packed":
        z = rng.integers(0, 1 << bits, (n, blocks))
        per = 8 // bits
        z = np.pad(z, [(0, 0), (0, -blocks % per)])
        return b, scales, _pack(z, bits)
    if zp == "float":
        return b, scales, rng.uniform(0, (1 << bits) - 1, (n, blocks)).astype(np.float32)
    return b, scales, None


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("zp", ["none", "packed", "float"])
@pytest.mark.parametrize(
    ("bits", "block", "k"), [(4, 32, 64), (4, 16, 40), (4, 128, 96), (8, 32, 64), (2, 16, 48)]
)
def test_matmul_nbits(
    contrib_parity: Any,
    rng: np.random.Generator,
    bits: int,
    block: int,
    k: int,
    zp: str,
    with_bias: bool,
) -> None:
    n = 12
    b, scales, z = _nbits_inputs(rng, n, k, block, bits, zp)
    inputs = [_f(rng, (2, 3, k)), b, scales, z, None, _f(rng, (n,)) if with_bias else None]
    node = _node("MatMulNBits", _names(inputs), K=k, N=n, bits=bits, block_size=block)
    # onnxruntime's CPU kernel refuses 8-bit weights with float zero points
    reference = _nbits_reference(k, block, bits) if bits == 8 and zp == "float" else None
    contrib_parity(node, _present(inputs), reference=reference)


def test_matmul_nbits_accuracy_level_4(contrib_parity: Any, rng: np.random.Generator) -> None:
    """onnxruntime quantizes A to int8 per block at level 4: turnout's float product is
    within A's quantization of it."""
    n, k, block = 16, 128, 32
    b, scales, z = _nbits_inputs(rng, n, k, block, 4, "packed")
    inputs = [_f(rng, (4, k)), b, scales, z]
    node = _node(
        "MatMulNBits", _names(inputs), K=k, N=n, bits=4, block_size=block, accuracy_level=4
    )
    contrib_parity(node, inputs, tol=0.02)


def _nbits_reference(k: int, block: int, bits: int) -> Any:
    """MatMulNBits as documented, in float64: codes unpacked low bits first, (code - zero
    point) * scale per block (g_idx, when given, names each k's block), A @ W^T + bias."""

    def reference(
        a: np.ndarray,
        b: np.ndarray,
        s: np.ndarray,
        zp: np.ndarray | None = None,
        g_idx: np.ndarray | None = None,
        bias: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        n = b.shape[0]
        mask = (1 << bits) - 1
        shifts = range(0, 8, bits)
        codes = np.stack([(b.reshape(n, -1) >> sh) & mask for sh in shifts], -1)
        codes = codes.reshape(n, -1)[:, :k].astype(np.float64)
        which = np.arange(k) // block if g_idx is None else g_idx
        z = np.float64(1 << (bits - 1)) if zp is None else zp.astype(np.float64)[:, which]
        w = (codes - z) * s.astype(np.float64)[:, which]
        y = a.astype(np.float64) @ w.T + (0 if bias is None else bias)
        return [y.astype(np.float32)]

    return reference


def test_matmul_nbits_g_idx(contrib_parity: Any, rng: np.random.Generator) -> None:
    """g_idx names each k's block (act-order): checked against the documented semantics."""
    n, k, block = 8, 64, 16
    b, scales, _ = _nbits_inputs(rng, n, k, block, 4, "none")
    g_idx = rng.permutation(np.arange(k) // block).astype(np.int32)
    inputs = [_f(rng, (3, k)), b, scales, None, g_idx]
    node = _node("MatMulNBits", _names(inputs), K=k, N=n, bits=4, block_size=block)
    contrib_parity(node, inputs, reference=_nbits_reference(k, block, 4))


@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize(("bits", "block"), [(4, 16), (8, 32), (4, 32)])
def test_gather_block_quantized_uint8(
    contrib_parity: Any, rng: np.random.Generator, bits: int, block: int, with_zp: bool
) -> None:
    rows, k = 10, 64
    blocks = k // block
    data = (
        _pack(rng.integers(0, 1 << bits, (rows, k)), bits)
        if bits < 8
        else _q(rng, (rows, k), np.uint8)
    )
    scales = rng.uniform(0.01, 0.05, (rows, blocks)).astype(np.float32)
    zp = None
    if with_zp:
        zp = rng.integers(0, 1 << bits, (rows, blocks))
        zp = (
            _pack(np.pad(zp, [(0, 0), (0, -blocks % (8 // bits))]), bits)
            if bits < 8
            else zp.astype(np.uint8)
        )
    indices = np.array([[0, 3, 9], [-1, 4, 10]], np.int64)  # 10: out of range, zeros
    inputs = [data, indices, scales, zp]
    node = _node("GatherBlockQuantized", _names(inputs), bits=bits, block_size=block)
    contrib_parity(node, _present(inputs))


@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize("dt", [ml_dtypes.int4, ml_dtypes.uint4])
@pytest.mark.parametrize(("gather_axis", "quantize_axis"), [(0, 1), (1, 0), (0, 2)])
def test_gather_block_quantized_int4(
    contrib_parity: Any,
    rng: np.random.Generator,
    dt: Any,
    with_zp: bool,
    gather_axis: int,
    quantize_axis: int,
) -> None:
    shape = tuple(32 if i == quantize_axis else 6 - i for i in range(3))
    lo, hi = (-8, 7) if dt == ml_dtypes.int4 else (0, 15)
    data = rng.integers(lo, hi, shape, endpoint=True).astype(dt)
    s_shape = list(shape)
    s_shape[quantize_axis] //= 16
    scales = rng.uniform(0.01, 0.05, s_shape).astype(np.float32)
    zp = rng.integers(lo, hi, s_shape, endpoint=True).astype(dt) if with_zp else None
    size = shape[gather_axis]
    indices = np.array([0, size - 1, -2, 1], np.int32)
    inputs = [data, indices, scales, zp]
    node = _node(
        "GatherBlockQuantized",
        _names(inputs),
        block_size=16,
        gather_axis=gather_axis,
        quantize_axis=quantize_axis,
    )
    # onnxruntime's Python API feeds no int4 arrays: the table is an initializer
    contrib_parity(node, _present(inputs), constant={0, 3} if with_zp else {0})


@pytest.mark.parametrize(("a_shape", "b_shape"), [((4, 8), (8, 5)), ((2, 3, 16), (16, 4))])
def test_matmul_integer16(
    contrib_parity: Any,
    rng: np.random.Generator,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
) -> None:
    """onnxruntime's CPU kernel takes int16 x int16 only."""
    a, b = _q(rng, a_shape, np.int16) // 4, _q(rng, b_shape, np.int16) // 4
    contrib_parity(_node("MatMulInteger16", ["a", "b"]), [a, b])


@pytest.mark.parametrize("trans_b", [1, 0])
@pytest.mark.parametrize("quant_type", [0, 1], ids=["fp4", "nf4"])
@pytest.mark.parametrize(("n", "k", "block"), [(8, 32, 16), (5, 24, 64), (3, 7, 16)])
def test_matmul_bnb4(
    contrib_parity: Any,
    rng: np.random.Generator,
    n: int,
    k: int,
    block: int,
    quant_type: int,
    trans_b: int,
) -> None:
    """transB=0 against its documented product A @ W, W [N, K] read from onnxruntime's
    transB=1 result on the identity (its CPU kernel returns garbage for transB=0)."""
    b = _q(rng, ((n * k + 1) // 2,), np.uint8)
    absmax = rng.uniform(0.5, 2, -(-n * k // block)).astype(np.float32)
    a = _f(rng, (2, 3, k if trans_b else n))
    attrs = {"K": k, "N": n, "block_size": block, "quant_type": quant_type}
    node = _node("MatMulBnb4", ["a", "b", "m"], transB=trans_b, **attrs)
    if trans_b:
        contrib_parity(node, [a, b, absmax], constant={1, 2})
        return
    identity = np.eye(k, dtype=np.float32)
    w_t = run_onnxruntime(_node("MatMulBnb4", ["a", "b", "m"], **attrs), [identity, b, absmax], 17)
    want = a.astype(np.float64) @ w_t[0].T.astype(np.float64)
    contrib_parity(node, [a, b, absmax], reference=lambda *_: [want.astype(np.float32)])


@pytest.mark.parametrize(
    ("block", "scale_rows"), [(16, 6), (0, 6), (16, 1)], ids=["blocks", "whole_row", "shared"]
)
@pytest.mark.parametrize("dt", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_gather_block_quantized_float8(
    contrib_parity: Any, rng: np.random.Generator, dt: Any, block: int, scale_rows: int
) -> None:
    """float8 tables: code * its block's scale (block_size 0: one scale per row; a scales
    axis of 1 shared by every row), no zero points."""
    data = rng.standard_normal((6, 32)).astype(dt)
    scales = rng.uniform(0.5, 2, (scale_rows, 32 // block if block else 1)).astype(np.float32)
    indices = np.array([[5, 0], [-1, 2]], np.int64)
    node = _node("GatherBlockQuantized", ["d", "i", "s"], block_size=block, quantize_axis=1)
    contrib_parity(node, [data, indices, scales], constant={0})
