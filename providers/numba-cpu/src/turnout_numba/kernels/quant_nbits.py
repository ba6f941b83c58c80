"""com.microsoft::MatMulNBits with 4-bit weights: `A @ dequantize(B)^T + bias`, B kept packed.

onnxruntime's quantizer (MatMulNBitsQuantizer) stores a MatMul weight as [N, K/block, block/2]
bytes, two 4-bit codes a byte (low nibble first), one float scale per (column, block) and an
optional zero point per (column, block): packed 4-bit bytes or floats, 8 when absent. The numpy
kernel dequantizes the whole [K, N] float32 matrix once and keeps it (8x the packed bytes); here
B stays packed, laid out once in tiles of `TILE` columns ([tiles, blocks, block/2, TILE]: the
same bytes, a tile's columns side by side, so that unpacking loops run along the tile and
vectorize), and is dequantized inside the product, by the number of rows M of A:
- up to `FEW_ROWS` (decoding): each task reads its tile's bytes once a row, one multiply-add a
  code, scale and zero point applied once a block (`_nbits4_rows`);
- up to `BLAS_ROWS`: each task unpacks a block of its tile into a [block, TILE] float32 scratch,
  then adds `a[m, k] * w[k, :]` for eight rows of K at a time into a [M, TILE] accumulator (an
  outer product: independent lanes, so it vectorizes without reordering sums) (`_nbits4`);
- more rows: `COLUMN_TILES` tiles at a time are unpacked to a [K, 256] float32 panel (a
  transient, a fraction N/256 of the whole matrix) and multiplied by BLAS, whose fused
  multiply-adds numba cannot emit (`_dequant_columns`).
What a session keeps is the packed B, and scales and zero points as float32 per block: each
smaller than the float matrix, whatever the block size.

Float32 A only, at onnxruntime's accuracy_level 0 result (float products; its level 4 quantizes
A to int8, a difference within A's quantization, as the numpy kernel). Declined, left to the
numpy kernel: other bit widths, block sizes outside 16..256 or not powers of two, g_idx (act
order), a B, scales or zero points that are not constant, float16/bfloat16 A.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.constants import constant_input

from ..codegen import numba_array
from ..registry import BuildContext, SizedKernel, numba_kernel

__all__ = ["TILE", "NBitsWeight"]

Array = np.ndarray[Any, Any]

TILE = 64
"""Columns of B per parallel task. Loops of 16 columns did not vectorize (LLVM's checks that
the scratch and the accumulator do not overlap cost more than 16 lanes save: 4.5x slower at
K=N=1024); 64 do. The scratch is 8 kB at block 32 (L1), 64 kB at block 256 (L2)."""


FEW_ROWS = 4
"""Rows of A up to which the weights are read straight from the bytes for every row
(`_nbits4_rows`) rather than unpacked once into a scratch shared by the rows (`_nbits4`)."""


BLAS_ROWS = 16
"""Rows of A above which a few tiles of columns at a time are dequantized to float32 and
multiplied by BLAS (`_dequant_columns`): its fused multiply-adds beat the compiled outer
product, which numba cannot contract, once the unpacking is shared by this many rows."""

COLUMN_TILES = 4
"""Tiles (of TILE columns) dequantized at a time for BLAS: [K, 256] float32, 4 MB at K=4096
against 16 MB for the whole [4096, 1024] matrix."""


def _nbits4(a: Any, b: Any, s: Any, z: Any, bias: Any, y: Any) -> None:  # pragma: no cover
    """y[m, n] = sum_k a[m, k] * (code(n, k) - z[n, k // bs]) * s[n, k // bs] + bias[n], B in
    tiles of T columns: b [tiles, blocks, bs/2, T] bytes, s and z [tiles, blocks, T]."""
    m_, k_ = a.shape
    tiles, blocks, blob, tile = b.shape
    n_ = y.shape[1]
    bs = blob * 2
    has_bias = bias.shape[0] == n_
    for t in prange(tiles):
        n0 = t * tile
        w = min(tile, n_ - n0)
        acc = np.zeros((m_, tile), np.float32)
        deq = np.empty((bs, tile), np.float32)
        for blk in range(blocks):
            k0 = blk * bs
            kl = min(bs, k_ - k0)
            sc = s[t, blk]
            zz = z[t, blk]
            pb = b[t, blk]
            for i in range(blob):  # a tile's columns a step: the unpacking vectorizes
                row = pb[i]
                d0 = deq[2 * i]
                d1 = deq[2 * i + 1]
                for j in range(tile):
                    v = row[j]
                    d0[j] = (np.float32(v & 15) - zz[j]) * sc[j]
                    d1[j] = (np.float32(v >> 4) - zz[j]) * sc[j]
            k4 = kl - kl % 8
            for mi in range(m_):
                ar = a[mi]
                accr = acc[mi]
                for kk in range(0, k4, 8):  # eight rows of K per pass over the accumulator
                    a0 = ar[k0 + kk]
                    a1 = ar[k0 + kk + 1]
                    a2 = ar[k0 + kk + 2]
                    a3 = ar[k0 + kk + 3]
                    a4 = ar[k0 + kk + 4]
                    a5 = ar[k0 + kk + 5]
                    a6 = ar[k0 + kk + 6]
                    a7 = ar[k0 + kk + 7]
                    r0 = deq[kk]
                    r1 = deq[kk + 1]
                    r2 = deq[kk + 2]
                    r3 = deq[kk + 3]
                    r4 = deq[kk + 4]
                    r5 = deq[kk + 5]
                    r6 = deq[kk + 6]
                    r7 = deq[kk + 7]
                    for j in range(tile):
                        accr[j] += ((a0 * r0[j] + a1 * r1[j]) + (a2 * r2[j] + a3 * r3[j])) + (
                            (a4 * r4[j] + a5 * r5[j]) + (a6 * r6[j] + a7 * r7[j])
                        )
                for kk in range(k4, kl):
                    av = ar[k0 + kk]
                    dr = deq[kk]
                    for j in range(tile):
                        accr[j] += av * dr[j]
        for mi in range(m_):
            for j in range(w):
                v = acc[mi, j]
                if has_bias:
                    v += bias[n0 + j]
                y[mi, n0 + j] = v


def _dequant_columns(b: Any, s: Any, z: Any, t0: Any, t1: Any) -> Any:  # pragma: no cover
    """The float32 weights of tiles t0..t1 as [blocks * bs, (t1 - t0) * T] (K rows, padded
    to whole blocks), for a product by BLAS; one parallel task per tile."""
    _, blocks, blob, tile = b.shape
    bs = blob * 2
    out = np.empty((blocks * bs, (t1 - t0) * tile), np.float32)
    for t in prange(t0, t1):
        c0 = (t - t0) * tile
        for blk in range(blocks):
            sc = s[t, blk]
            zz = z[t, blk]
            pb = b[t, blk]
            for i in range(blob):
                row = pb[i]
                # (row slices: an index `c0 + j` into whole rows did not vectorize, 2.7x slower)
                d0 = out[blk * bs + 2 * i, c0 : c0 + tile]
                d1 = out[blk * bs + 2 * i + 1, c0 : c0 + tile]
                for j in range(tile):
                    v = row[j]
                    d0[j] = (np.float32(v & 15) - zz[j]) * sc[j]
                    d1[j] = (np.float32(v >> 4) - zz[j]) * sc[j]
    return out


def _nbits4_rows(a: Any, b: Any, s: Any, z: Any, bias: Any, y: Any) -> None:  # pragma: no cover
    """`_nbits4` for a few rows of A (decoding): per block, p = sum_k a[m, k] * code(n, k)
    straight from the bytes, then y += s * (p - z * sum_k a[m, k]): no scratch, one convert
    and one multiply-add a weight."""
    m_, k_ = a.shape
    tiles, blocks, blob, tile = b.shape
    n_ = y.shape[1]
    bs = blob * 2
    has_bias = bias.shape[0] == n_
    for t in prange(tiles):
        n0 = t * tile
        w = min(tile, n_ - n0)
        acc = np.zeros((m_, tile), np.float32)
        p = np.empty(tile, np.float32)
        for blk in range(blocks):
            k0 = blk * bs
            kl = min(bs, k_ - k0)
            sc = s[t, blk]
            zz = z[t, blk]
            pb = b[t, blk]
            for mi in range(m_):
                ar = a[mi]
                p[:] = 0
                asum = np.float32(0)
                for i in range((kl + 1) // 2):
                    a0 = ar[k0 + 2 * i]
                    a1 = ar[k0 + 2 * i + 1] if 2 * i + 1 < kl else np.float32(0)
                    asum += a0 + a1
                    row = pb[i]
                    for j in range(tile):
                        v = row[j]
                        p[j] += a0 * np.float32(v & 15) + a1 * np.float32(v >> 4)
                accr = acc[mi]
                for j in range(tile):
                    accr[j] += sc[j] * (p[j] - zz[j] * asum)
        for mi in range(m_):
            for j in range(w):
                v = acc[mi, j]
                if has_bias:
                    v += bias[n0 + j]
                y[mi, n0 + j] = v


def _kernels(ctx: BuildContext) -> tuple[SizedKernel, SizedKernel, SizedKernel]:
    f32 = np.dtype(np.float32)
    sig = types.void(
        numba_array(f32, 2, readonly=True, layout="C"),
        numba_array(np.dtype(np.uint8), 4, readonly=True, layout="C"),
        numba_array(f32, 3, readonly=True, layout="C"),
        numba_array(f32, 3, readonly=True, layout="C"),
        numba_array(f32, 1, readonly=True, layout="C"),
        numba_array(f32, 2, readonly=False, layout="C"),
    )
    u8, f3 = sig.args[1], sig.args[2]
    cols = numba_array(f32, 2, readonly=False, layout="C")(u8, f3, f3, types.int64, types.int64)
    return ctx.jit(_nbits4, [sig]), ctx.jit(_nbits4_rows, [sig]), ctx.jit(_dequant_columns, [cols])


class NBitsWeight:
    """A constant 4-bit B as the kernel reads it: the packed bytes [N, blocks, block/2], and
    scales and zero points as float32 [N, blocks], checked against N, K and block_size."""

    def __init__(self, name: str, n: int, k: int, block: int, b: Array, scales: Any, zp: Any):
        blocks = -(-k // block)
        if b.dtype != np.uint8 or b.shape != (n, blocks, block // 2):
            raise InvalidArgument(
                f"{name}: B {b.dtype}{list(b.shape)} does not fit N={n}, K={k}, "
                f"block_size={block}, bits=4: must be uint8{[n, blocks, block // 2]}"
            )
        s = np.asarray(scales)
        if s.size != n * blocks:
            raise InvalidArgument(f"{name}: scales {s.shape} must hold N*blocks={n * blocks}")
        self.b = _tiled(b)
        self.scales = _tiled(s.reshape(n, blocks).astype(np.float32, copy=False))
        self.zero = _tiled(_zero_points(name, zp, n, blocks))
        for arr in self.arrays():
            arr.flags.writeable = False

    def arrays(self) -> tuple[Array, ...]:
        """Every array this weight holds (what a session keeps for the node)."""
        return self.b, self.scales, self.zero


def _tiled(x: Array) -> Array:
    """[N, ...] as [ceil(N / TILE), ..., TILE]: a tile's columns side by side (the padding
    columns zero: scale 0, so they add nothing)."""
    n = x.shape[0]
    pad = -n % TILE
    if pad:
        x = np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)])
    t = x.reshape(-1, TILE, *x.shape[1:])
    return np.ascontiguousarray(np.moveaxis(t, 1, -1))


def _zero_points(name: str, zp: Any, n: int, blocks: int) -> Array:
    """Zero points as float32 [N, blocks]: 8 when absent, packed 4-bit bytes unpacked (low
    nibble first), floats as given."""
    if zp is None:
        return np.full((n, blocks), 8.0, np.float32)
    zp = np.asarray(zp)
    if zp.dtype == np.uint8:
        per_row = -(-blocks // 2)
        if zp.size != n * per_row:
            raise InvalidArgument(
                f"{name}: packed zero_points {zp.shape} must hold N*ceil(blocks/2)={n * per_row}"
            )
        rows = zp.reshape(n, per_row)
        codes = np.stack([rows & 15, rows >> 4], axis=-1).reshape(n, -1)[:, :blocks]
        return np.ascontiguousarray(codes, np.float32)
    if zp.size != n * blocks:
        raise InvalidArgument(f"{name}: zero_points {zp.shape} must hold N*blocks={n * blocks}")
    return np.ascontiguousarray(zp.reshape(n, blocks), np.float32)


def _const(kn: KernelNode, i: int) -> Array | None:
    """Input `i` when it is a constant initializer, else None."""
    if i >= len(kn.node.inputs) or not kn.node.inputs[i] or not constant_input(kn, i):
        return None
    v = kn.node.graph.initializers.get(kn.node.inputs[i])
    return v if isinstance(v, np.ndarray) else None


def _given(kn: KernelNode, i: int) -> bool:
    return i < len(kn.node.inputs) and bool(kn.node.inputs[i])


def _applies(kn: KernelNode) -> str | None:
    bits = int(kn.attr("bits", 4))
    block = int(kn.attr("block_size", 0))
    if bits != 4:
        return f"MatMulNBits bits={bits}: numba compiles 4 bits"
    if not 16 <= block <= 256 or block & (block - 1):
        return f"MatMulNBits block_size={block}: numba compiles powers of two in 16..256"
    if kn.attr("weight_prepacked", 0):
        return "MatMulNBits weight_prepacked: a CUDA layout"
    a = kn.inputs[0]
    if a is None or a.elem_type is None or a.dtype != np.float32:
        return "MatMulNBits: numba compiles float32 A known at session creation"
    if _given(kn, 4):
        return "MatMulNBits with g_idx: not compiled by numba"
    for i, what in ((1, "B"), (2, "scales"), (3, "zero_points")):
        if (i < 3 or _given(kn, i)) and _const(kn, i) is None:
            return f"MatMulNBits: numba keeps B packed only when {what} is a constant"
    if _given(kn, 5) and (kn.inputs[5] is None or kn.inputs[5].dtype != np.float32):
        return "MatMulNBits: numba compiles a float32 bias"
    return None


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name = kn.name
    n, k, block = (int(kn.attr(a)) for a in ("N", "K", "block_size"))
    b, scales = _const(kn, 1), _const(kn, 2)
    assert b is not None and scales is not None  # (`_applies` checked them)
    weight = NBitsWeight(name, n, k, block, b, scales, _const(kn, 3))
    blocked, rows, columns = _kernels(ctx)
    tiles = weight.b.shape[0]
    no_bias = np.zeros(0, np.float32)

    def run(
        a: Array,
        _b: Array,
        _scales: Array,
        _zp: Any = None,
        _g_idx: Any = None,
        bias: Any = None,
    ) -> tuple[Array]:
        if a.dtype != np.float32 or a.ndim < 1 or a.shape[-1] != k:
            raise InvalidArgument(
                f"{name}: A {a.dtype}{list(a.shape)} must be float32 ending in K={k}"
            )
        if bias is not None and bias.shape != (n,):
            raise InvalidArgument(f"{name}: bias {bias.shape} must be ({n},)")
        lead = a.shape[:-1]
        a2 = np.ascontiguousarray(a.reshape(-1, k))
        y = np.empty((a2.shape[0], n), np.float32)
        if y.size:
            bv = no_bias if bias is None else np.ascontiguousarray(bias, np.float32)
            m = a2.shape[0]
            if m > BLAS_ROWS:
                _by_columns(a2, y, weight, columns, tiles)
                if bias is not None:
                    y += bv
            else:
                kernel = rows if m <= FEW_ROWS else blocked
                kernel(m * k * n, a2, weight.b, weight.scales, weight.zero, bv, y)
        return (y.reshape(*lead, n),)

    run.weight = weight  # type: ignore[attr-defined]  # (what the node keeps, for tests)
    return run


def _by_columns(a2: Array, y: Array, weight: NBitsWeight, columns: SizedKernel, tiles: int) -> None:
    """y = a2 @ dequantize(B)^T, `COLUMN_TILES` tiles of columns dequantized at a time and
    multiplied by float32 BLAS."""
    k = a2.shape[1]
    n = y.shape[1]
    for t0 in range(0, tiles, COLUMN_TILES):
        t1 = min(tiles, t0 + COLUMN_TILES)
        c0, c1 = t0 * TILE, min(n, t1 * TILE)
        w = columns(k * (c1 - c0), weight.b, weight.scales, weight.zero, t0, t1)
        y[:, c0:c1] = np.matmul(a2, w[:k, : c1 - c0])


numba_kernel("MatMulNBits", since=1, domain=DOMAIN, applies=_applies)(_build)
