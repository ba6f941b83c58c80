"""numpy kernels of the quantized matrix products and lookups of com.microsoft: QGemm,
MatMulIntegerToFloat, DynamicQuantizeMatMul, MatMulInteger16, MatMulNBits, MatMulBnb4 and
GatherBlockQuantized.

Integer products are exact (`matmul.integer_product`) and scaled in float32 as onnxruntime's
output processors do (`acc * (a_scale * b_scale)`, requantized half to even when the output is
quantized). Block-quantized weights are unpacked (low bits first) and dequantized to float32,
then multiplied in float32: onnxruntime's result at accuracy level 0 (its int8 level 4 quantizes
A as well, a difference within the quantization of A). MatMulNBits and MatMulBnb4 keep the
dequantized weight of a constant B for the next run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.matmul import integer_product
from turnout.providers.cpu.kernels.quant import dynamic_quantize_linear, quantize
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.constants import constant_input, transposed
from turnout.sdk.semantics.shape import norm_axis

__all__ = ["unpack_bits"]

Array = np.ndarray[Any, Any]


def _float32(x: Any) -> Array:
    return np.asarray(x, np.float32)


@cpu_kernel("QGemm", since=1, domain=DOMAIN)
def qgemm(node: KernelNode) -> KernelFn:
    """alpha * a_scale * b_scale * ((A - a_zp) @ (B - b_zp) + C): float, or requantized to
    y_scale / y_zero_point when they are given; b's parameters per tensor or per column."""
    alpha = np.float32(node.attr("alpha", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    name = node.name

    def run(
        a: Array,
        a_scale: Array,
        a_zp: Array,
        b: Array,
        b_scale: Array,
        b_zp: Array,
        c: Array | None = None,
        y_scale: Array | None = None,
        y_zp: Array | None = None,
    ) -> tuple[Array]:
        if a.ndim != 2 or b.ndim != 2:
            raise InvalidArgument(f"{name}: QGemm needs 2-D A and B, got {a.shape}, {b.shape}")
        acc = integer_product(name, a.T if trans_a else a, a_zp, b.T if trans_b else b, b_zp)
        if c is not None:
            try:
                acc = acc + c.astype(np.float64)
            except ValueError:
                raise InvalidArgument(
                    f"{name}: C {c.shape} does not broadcast to {acc.shape}"
                ) from None
        scale = alpha * _float32(a_scale) * _float32(b_scale)
        if y_scale is None:
            return (acc.astype(np.float32) * scale,)
        dt = np.dtype(np.uint8) if y_zp is None else y_zp.dtype
        return (quantize(acc.astype(np.float32) * (scale / _float32(y_scale)), 1, y_zp, dt),)

    return run


def _scaled_product(
    name: str,
    a: Array,
    a_scale: Any,
    a_zp: Any,
    b: Array,
    b_scale: Array,
    b_zp: Any,
    bias: Array | None,
) -> Array:
    """(A - a_zp) @ (B - b_zp) * (a_scale * b_scale) + bias, in float32."""
    y = integer_product(name, a, a_zp, b, b_zp).astype(np.float32)
    y *= _float32(a_scale) * _float32(b_scale)
    if bias is not None:
        y += _float32(bias)
    return y


@cpu_kernel("MatMulIntegerToFloat", since=1, domain=DOMAIN)
def matmul_integer_to_float(node: KernelNode) -> KernelFn:
    name = node.name

    def run(
        a: Array,
        b: Array,
        a_scale: Array,
        b_scale: Array,
        a_zp: Array | None = None,
        b_zp: Array | None = None,
        bias: Array | None = None,
    ) -> tuple[Array]:
        y = _scaled_product(name, a, a_scale, a_zp, b, b_scale, b_zp, bias)
        return (y.astype(a_scale.dtype, copy=False),)

    return run


@cpu_kernel("DynamicQuantizeMatMul", since=1, domain=DOMAIN)
def dynamic_quantize_matmul(node: KernelNode) -> KernelFn:
    """A quantized to uint8 as DynamicQuantizeLinear does (per tensor, its range with 0),
    then MatMulIntegerToFloat."""
    name = node.name
    quantize_a = dynamic_quantize_linear(node)

    def run(
        a: Array,
        b: Array,
        b_scale: Array,
        b_zp: Array | None = None,
        bias: Array | None = None,
    ) -> tuple[Array]:
        aq, a_scale, a_zp = quantize_a(a)
        return (_scaled_product(name, aq, a_scale, a_zp, b, b_scale, b_zp, bias),)

    return run


def unpack_bits(packed: Array, bits: int) -> Array:
    """uint8 bytes holding 8 // bits codes each, low bits first, unpacked along the last axis."""
    if bits == 8:
        return packed
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    codes = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], -1)


def _nbits_weight(
    node: KernelNode,
    shape: tuple[int, int, int],
    b: Array,
    scales: Array,
    zp: Array | None,
    g_idx: Array | None,
) -> Array:
    """The dequantized weight, [N, K] float32."""
    n, k, block = shape
    bits = int(node.attr("bits", 4))
    blocks = -(-k // block)
    if b.shape != (n, blocks, block * bits // 8) or scales.size != n * blocks:
        raise InvalidArgument(
            f"{node.name}: B {b.shape} and scales {scales.shape} do not fit N={n}, K={k}, "
            f"block_size={block}, bits={bits}: B must be {(n, blocks, block * bits // 8)}"
        )
    codes = unpack_bits(b.reshape(n, -1), bits)[:, :k]
    s = _float32(scales).reshape(n, blocks)
    if zp is None:
        z: Array = np.float32(1 << (bits - 1)) * np.ones((1, 1), np.float32)
    elif zp.dtype == np.uint8:
        z = unpack_bits(zp.reshape(n, -1), bits)[:, :blocks].astype(np.float32)
    else:
        z = _float32(zp).reshape(n, blocks)
    if g_idx is not None:
        if g_idx.shape != (k,) or (g_idx < 0).any() or (g_idx >= blocks).any():
            raise InvalidArgument(f"{node.name}: g_idx must be {k} block indices below {blocks}")
        which = g_idx.astype(np.intp)
    else:
        which = np.arange(k) // block
    zk = z if z.shape == (1, 1) else z[:, which]
    out: Array = (codes.astype(np.float32) - zk) * s[:, which]
    return out


def _nbits_refusal(node: KernelNode) -> str | None:
    bits = int(node.attr("bits", 4))
    if bits not in (2, 4, 8):
        return f"MatMulNBits with bits={bits}: turnout unpacks 2, 4 and 8 bits"
    if node.attr("weight_prepacked", 0):
        return "MatMulNBits with weight_prepacked: a CUDA layout"
    return None


@cpu_kernel("MatMulNBits", since=1, domain=DOMAIN, supports=_nbits_refusal)
def matmul_nbits(node: KernelNode) -> KernelFn:
    """A @ dequantized(B)^T + bias, B block-quantized along K (see the module docstring)."""
    shape = (int(node.attr("N")), int(node.attr("K")), int(node.attr("block_size")))
    constant = all(constant_input(node, i) for i in (1, 2, 3, 4) if i < len(node.inputs))
    kept: list[Any] = [None, None]  # (B, scales, zero points, g_idx) identities, W^T

    def weight_t(b: Array, scales: Array, zp: Array | None, g_idx: Array | None) -> Array:
        key = (id(b), id(scales), id(zp), id(g_idx))
        if kept[0] == key:
            w_t: Array = kept[1]
            return w_t
        w_t = transposed(_nbits_weight(node, shape, b, scales, zp, g_idx))
        if constant:
            kept[:] = [key, w_t]
        return w_t

    def run(
        a: Array,
        b: Array,
        scales: Array,
        zp: Array | None = None,
        g_idx: Array | None = None,
        bias: Array | None = None,
    ) -> tuple[Array]:
        n, k, _ = shape
        if a.ndim < 1 or a.shape[-1] != k:
            raise InvalidArgument(f"{node.name}: A {a.shape} must end in K={k}")
        if b.size == 0:  # an omitted projection
            y = np.zeros((*a.shape[:-1], n), np.float32)
        else:
            y = np.matmul(a.astype(np.float32, copy=False), weight_t(b, scales, zp, g_idx))
        if bias is not None:
            y += _float32(bias)
        return (y.astype(a.dtype, copy=False),)

    return run


def _along(p: Array, axis: int, size: int, block: int) -> Array:
    """A per-block parameter repeated to one value per element along `axis` (size 1 stays)."""
    if p.shape[axis] == 1:
        return p
    return np.repeat(p, block if block else size, axis=axis).take(np.arange(size), axis=axis)


@cpu_kernel("GatherBlockQuantized", since=1, domain=DOMAIN)
def gather_block_quantized(node: KernelNode) -> KernelFn:
    """Gather of a block-quantized table, the gathered slices dequantized with their blocks'
    scales and zero points; an out-of-range index gives zeros."""
    bits = int(node.attr("bits", 4))
    block = int(node.attr("block_size", 128))
    name = node.name

    def run(data: Array, indices: Array, scales: Array, zp: Array | None = None) -> tuple[Array]:
        rank = data.ndim
        g_axis = norm_axis(node, int(node.attr("gather_axis", 0)), rank)
        q_axis = norm_axis(node, int(node.attr("quantize_axis", 1)), rank)
        packed = data.dtype == np.uint8 and bits < 8
        if packed and g_axis == rank - 1:
            raise InvalidArgument(f"{name}: packed uint8 data cannot be gathered on its last axis")
        dim = data.shape[g_axis]
        idx = np.asarray(indices).astype(np.int64)
        valid = (idx >= -dim) & (idx < dim)
        safe = np.where(valid, np.where(idx < 0, idx + dim, idx), 0)

        def gathered(t: Array) -> Array:
            rows = safe if t.shape[g_axis] == dim else np.zeros_like(safe)
            return np.take(t, rows, axis=g_axis)

        out_axis = q_axis if q_axis < g_axis else q_axis + idx.ndim - 1
        z: Array | None = None
        if data.dtype == np.uint8:
            codes = gathered(data)
            values = (unpack_bits(codes, bits) if packed else codes).astype(np.float32)
            if zp is None:
                z = np.full((1,) * values.ndim, 1 << (bits - 1), np.float32)
            else:
                z = gathered(zp)
                z = unpack_bits(z, bits) if packed else z
                z = z[..., : scales.shape[-1]] if q_axis == rank - 1 else z
        else:  # int4 / uint4 and the float8 / float4 codes: one byte each, gathered as bytes
            # (numpy's take refuses these types), then read as their type
            values = gathered(data.view(np.uint8)).view(data.dtype).astype(np.float32)
            if zp is not None:
                z = gathered(zp.view(np.uint8)).view(zp.dtype)
        size = values.shape[out_axis]
        s = _along(gathered(_float32(scales)), out_axis, size, block)
        if z is not None:
            z = z.astype(np.float32)
            values -= z if z.size == 1 else _along(z, out_axis, size, block)
        out = values * s
        mask = valid.reshape((1,) * g_axis + idx.shape + (1,) * (rank - g_axis - 1))
        return ((out * mask).astype(scales.dtype),)

    return run


@cpu_kernel("MatMulInteger16", since=1, domain=DOMAIN)
def matmul_integer16(node: KernelNode) -> KernelFn:
    """A @ B of 16-bit integers, exact, as int32 (uint32 for two uint16 operands); a sum
    beyond 32 bits wraps, as onnxruntime's does."""

    def run(a: Array, b: Array) -> tuple[Array]:
        unsigned = a.dtype == b.dtype == np.uint16
        acc = integer_product(node.name, a, None, b, None).astype(np.int64)
        return (acc.astype(np.uint32 if unsigned else np.int32),)

    return run


_FP4 = (0.0, 0.0052083333, 0.6666667, 1.0, 0.3333333, 0.5, 0.1666667, 0.25)
_NF4 = (
    *(-1.0, -0.6961928, -0.52507305, -0.3949175, -0.28444138, -0.18477343, -0.09105004, 0.0),
    *(0.0795803, 0.1609302, 0.2461123, 0.33791524, 0.44070983, 0.562617, 0.72295684, 1.0),
)
_BNB4_CODES = {0: (*_FP4, *(-v for v in _FP4)), 1: _NF4}
"""The values of the 4-bit codes: quant_type 0, bitsandbytes' FP4 (codes 8-15 the negatives of
0-7); 1, NF4 (the normal-float levels of the QLoRA paper)."""


@cpu_kernel("MatMulBnb4", since=1, domain=DOMAIN)
def matmul_bnb4(node: KernelNode) -> KernelFn:
    """A @ W^T (transB, the default) or A @ W, W [N, K] the codes' values (two a byte, high
    nibble first, over the flattened weight) times their block's absmax."""
    n, k, block = int(node.attr("N")), int(node.attr("K")), int(node.attr("block_size"))
    trans_b = bool(node.attr("transB", 1))
    quant_type = int(node.attr("quant_type"))
    if quant_type not in _BNB4_CODES:
        raise InvalidArgument(
            f"{node.name}: quant_type {quant_type} is neither 0 (FP4) nor 1 (NF4)"
        )
    codes = np.array(_BNB4_CODES[quant_type], np.float32)
    constant = constant_input(node, 1) and constant_input(node, 2)
    kept: list[Any] = [None, None]

    def weight(b: Array, absmax: Array) -> Array:
        key = (id(b), id(absmax))
        if kept[0] == key:
            w: Array = kept[1]
            return w
        blocks = -(-n * k // block)
        if b.size != (n * k + 1) // 2 or absmax.size != blocks:
            raise InvalidArgument(
                f"{node.name}: B {b.shape} / absmax {absmax.shape} do not fit N={n}, K={k}, "
                f"block_size={block}: {(n * k + 1) // 2} bytes and {blocks} blocks expected"
            )
        q = np.stack([b.reshape(-1) >> 4, b.reshape(-1) & 15], axis=-1).reshape(-1)[: n * k]
        scale = np.repeat(_float32(absmax).reshape(-1), block)[: n * k]
        w = (codes[q] * scale).reshape(n, k)
        w = transposed(w) if trans_b else np.ascontiguousarray(w)
        if constant:
            kept[:] = [key, w]
        return w

    def run(a: Array, b: Array, absmax: Array) -> tuple[Array]:
        w = weight(b, absmax)
        if a.ndim < 1 or a.shape[-1] != w.shape[0]:
            raise InvalidArgument(f"{node.name}: A {a.shape} must end in {w.shape[0]}")
        return (np.matmul(a.astype(np.float32, copy=False), w).astype(a.dtype, copy=False),)

    return run
