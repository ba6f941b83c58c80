"""onnxruntime's native weight-packing helpers, in numpy: the functions its weight-only
quantizers (`matmul_nbits_quantizer`, `matmul_bnb4_quantizer`) import from
`onnxruntime.capi._pybind_state` to write `com.microsoft` MatMulNBits and MatMulBnb4 weights.

Each takes onnxruntime's arguments in onnxruntime's order and writes its outputs in place, byte
for byte as onnxruntime 1.32's CPU package does (tests/test_weight_packing.py compares them),
so weights quantized on turnout load in either runtime:

- `quantize_matmul_{2,4,8}bits(dst, src, scale, zero_points, block_size, N, K, is_symmetric)`:
  `src` [K, N] quantized in blocks along K to MatMulNBits' B [N, K blocks, block bytes]
  (codes low bits first), its scales [N, K blocks] and packed zero points [N, ...];
- `quantize_qdq_matmul_{2,4}bits(...)`, same arguments: the QDQ layout (codes [K, N] packed
  row-major, scales [K blocks, N]); signed codes without zero points when symmetric, and it
  returns whether they are signed;
- `quantize_matmul_bnb4(dst, src, absmax, block_size, quant_type, N, K)`: `src` [N, K] as
  bitsandbytes' FP4 (quant_type 0) or NF4 (1) codes, high nibble first, blocked over the
  flattened weight, with each block's absolute maximum;
- `pack_fp4_weights_for_cuda_moe_gemm(q_weights, N, K)`: MXFP4 codes [N, K / 2] re-packed as
  [K, N / 2] for onnxruntime's CUDA MoE GEMM; returns the new bytes.

Rounding is onnxruntime's (half away from zero, in float32 arithmetic; float16 scales rounded
from float32). Where onnxruntime leaves bytes alone (the padding of a block, the unused bits of
a last byte) these do too. Where onnxruntime would silently lose an output (an output array of
another dtype, which its bindings copy) or write past a buffer, these raise instead.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any

import numpy as np
import numpy.typing as npt

from turnout.providers.cpu.kernels.contrib_quantized_matmul import unpack_bits

__all__ = [
    "pack_fp4_weights_for_cuda_moe_gemm",
    "quantize_matmul_2bits",
    "quantize_matmul_4bits",
    "quantize_matmul_8bits",
    "quantize_matmul_bnb4",
    "quantize_qdq_matmul_2bits",
    "quantize_qdq_matmul_4bits",
]

Array = npt.NDArray[Any]

_BLOCK_SIZES = (16, 32, 64, 128, 256)
"""The block sizes of onnxruntime's MatMulNBits and MatMulBnb4 packers."""
_INT32 = (-(2**31), 2**31 - 1)


# ---- arguments, checked as onnxruntime's bindings check them ----


def _int(value: Any, what: str) -> int:
    """An int32 argument; TypeError otherwise (onnxruntime's bindings accept nothing else)."""
    try:
        out = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__}") from None
    if not _INT32[0] <= out <= _INT32[1]:
        raise TypeError(f"{what}={out} does not fit a 32-bit int")
    return out


def _flag(value: Any, what: str) -> bool:
    """A bool argument: a number's truth, None as False (what onnxruntime's bindings take)."""
    if value is not None and not isinstance(value, (numbers.Number, np.bool_)):
        raise TypeError(f"{what} must be a bool, got {type(value).__name__}")
    return bool(value)


def _float_type(src: Any, params: Any) -> np.dtype[Any]:
    """float16 when the weight and its parameter array both are (onnxruntime's float16
    overload); float32 otherwise, converting the weight."""
    half = np.dtype(np.float16)
    both = isinstance(src, np.ndarray) and isinstance(params, np.ndarray)
    return half if both and src.dtype == params.dtype == half else np.dtype(np.float32)


def _input(value: Any, dtype: np.dtype[Any], size: int, what: str) -> Array:
    """The first `size` elements of an input, converted to `dtype` (row-major)."""
    flat = np.asarray(value, dtype=dtype).reshape(-1)
    if flat.size < size:
        raise ValueError(f"{what} holds {flat.size} values, {size} are needed")
    return flat[:size]


def _output(value: Any, dtype: np.dtype[Any] | type, size: int, what: str) -> Array:
    """A flat view of an output array written in place: onnxruntime's bindings would write a
    converted copy (an array of another dtype) and lose the result, or write past its end."""
    if not isinstance(value, np.ndarray) or value.dtype != np.dtype(dtype):
        got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise TypeError(f"{what} must be a numpy array of {np.dtype(dtype)}, got {got}")
    if not (value.flags.c_contiguous and value.flags.writeable):
        raise ValueError(f"{what} must be a writeable C-contiguous array")
    if value.size < size:
        raise ValueError(f"{what} holds {value.size} values, {size} are written")
    flat: Array = value.reshape(-1)
    return flat


def _zero_point_output(value: Any, symmetric: bool, size: int) -> Array | None:
    """The zero points written (asymmetric), or None: onnxruntime then ignores the array, but
    its bindings still require one."""
    if symmetric:
        if value is None:
            raise TypeError("zero_points must be an array of uint8 (unused when symmetric)")
        return None
    return _output(value, np.uint8, size, "zero_points")


# ---- arithmetic, as onnxruntime's (float32, C rounding) ----


def _round_half_away(x: Array) -> Array:
    """C's roundf: halves away from zero (numpy's rint rounds them to even)."""
    whole = np.trunc(x)
    with np.errstate(invalid="ignore"):  # inf - inf: an infinity stays itself
        step = np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0).astype(x.dtype)
    out: Array = whole + step
    return out


def _reciprocal(scale: Array) -> Array:
    """1 / scale in float32, 0 for a zero scale, read back from the stored scale's type."""
    s = scale.astype(np.float32)
    out: Array = np.divide(np.float32(1), s, out=np.zeros_like(s), where=s != 0)
    return out


def _block_params(
    lo: Array, hi: Array, bits: int, symmetric: bool, dtype: np.dtype[Any]
) -> tuple[Array, Array | None]:
    """Each block's scale (in `dtype`) and, when asymmetric, its zero point: the symmetric
    scale maps the value of larger magnitude to the most negative code; the asymmetric range
    always holds 0."""
    if symmetric:
        peak = np.where(np.abs(hi) > np.abs(lo), hi, lo)
        return (-peak / np.float32(1 << (bits - 1))).astype(dtype), None
    lo, hi = np.minimum(lo, np.float32(0)), np.maximum(hi, np.float32(0))
    scale = (hi - lo) / np.float32((1 << bits) - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        zero = np.where(scale != 0, -(lo / scale), lo)
    zp = np.clip(_round_half_away(zero), 0, (1 << bits) - 1).astype(np.uint8)
    return scale.astype(dtype), zp


def _ranges(blocks: Array, axis: int) -> tuple[Array, Array]:
    """Each block's minimum and maximum, NaN skipped as onnxruntime's comparisons skip it."""
    return np.fmin.reduce(blocks, axis=axis), np.fmax.reduce(blocks, axis=axis)


def _pack(codes: Array, bits: int) -> Array:
    """Codes [..., m] (m a multiple of 8 // bits) as bytes, the first code in the low bits."""
    per = 8 // bits
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    grouped = codes.astype(np.uint8).reshape(*codes.shape[:-1], -1, per) << shifts
    out: Array = np.bitwise_or.reduce(grouped, axis=-1)
    return out


def _pad(codes: Array, multiple: int, fill: Any) -> Array:
    """`codes` lengthened along the last axis to a multiple of `multiple` with `fill`."""
    extra = -codes.shape[-1] % multiple
    if not extra:
        return codes
    pad = np.broadcast_to(np.asarray(fill, codes.dtype), (*codes.shape[:-1], extra))
    return np.concatenate([codes, pad], axis=-1)


def _write_codes(out: Array, codes: Array, row: int, bits: int) -> None:
    """4-bit codes, flat over rows of `row` codes, packed two a byte into `out` as
    onnxruntime's QDQ quantizer writes them: a byte whose two codes lie in one row and one
    run of 128 columns takes both at once; any other code is set alone, in `bits` bits (4, or
    2 for its 2-bit variant, which sets 2), the byte's other bits kept."""
    size = codes.size
    pairs = _pad(codes, 2, 0).reshape(-1, 2).astype(np.uint8)
    first = np.arange(0, size, 2)
    second = first + 1
    alone = (second >= size) | (first // row != second // row)
    alone |= (first % row) // 128 != (second % row) // 128
    packed = pairs[:, 0] & 15 | (pairs[:, 1] & 15) << 4
    if alone.any():
        mask = (1 << bits) - 1
        low, high = pairs[alone, 0] & mask, pairs[alone, 1] & mask
        has_second = second[alone] < size
        kept = out[: packed.size][alone] & ~np.where(has_second, mask | mask << bits, mask)
        packed[alone] = kept | low | np.where(has_second, high << bits, 0).astype(np.uint8)
    out[: packed.size] = packed


# ---- MatMulNBits ----


def _tail_of_last_byte(codes: Array, k: int, block: int, per: int) -> Array:
    """The codes [N, K] padded to whole bytes as onnxruntime packs them: the unused slots of
    a last, partial byte repeat the codes one byte before, when that byte is in the same
    group of `per` blocks (onnxruntime's work unit), and are 0 otherwise."""
    used = k % per
    if not used:
        return codes
    start = k - used
    if start % (block * per):
        tail = codes[:, start - per + used : start]
    else:
        tail = np.zeros((codes.shape[0], per - used), codes.dtype)
    return np.concatenate([codes, tail], axis=1)


def _quantize_nbits(bits: int, args: tuple[Any, ...]) -> None:
    dst, src, scale, zero_points, block_size, n, k, is_symmetric = args
    block, n, k = _int(block_size, "block_size"), _int(n, "N"), _int(k, "K")
    symmetric = _flag(is_symmetric, "is_symmetric")
    if block not in _BLOCK_SIZES:
        raise RuntimeError(
            f"Only block sizes 16, 32, 64, 128, 256 are supported for quantization, got: {block}"
        )
    if n <= 0 or k <= 0:
        return  # onnxruntime writes nothing
    dtype, per = _float_type(src, scale), 8 // bits
    k_blocks = -(-k // block)
    row_bytes, zp_bytes = k_blocks * block * bits // 8, -(-k_blocks // per)
    out = _output(dst, np.uint8, n * row_bytes, "dst").reshape(-1)[: n * row_bytes]
    scales_out = _output(scale, dtype, n * k_blocks, "scale")
    zp_out = _zero_point_output(zero_points, symmetric, n * zp_bytes)
    w = _input(src, dtype, k * n, "src").reshape(k, n).T.astype(np.float32)
    blocks = np.pad(w, ((0, 0), (0, k_blocks * block - k)), mode="edge").reshape(n, k_blocks, -1)
    lo, hi = _ranges(blocks, axis=2)
    s, zp = _block_params(lo, hi, bits, symmetric, dtype)
    z = np.float32(1 << (bits - 1)) if zp is None else zp.astype(np.float32)[..., None]
    q = _round_half_away(blocks * _reciprocal(s)[..., None] + z)
    codes = np.clip(q, 0, (1 << bits) - 1).astype(np.uint8).reshape(n, -1)[:, :k]
    packed = _pack(_tail_of_last_byte(codes, k, block, per), bits)
    out.reshape(n, row_bytes)[:, : packed.shape[1]] = packed
    scales_out[: n * k_blocks] = s.reshape(-1)
    if zp is not None and zp_out is not None:
        zp_out[: n * zp_bytes] = _pack(_pad(zp, per, 1 << (bits - 1)), bits).reshape(-1)


def quantize_matmul_2bits(
    dst: Array,
    src: Any,
    scale: Array,
    zero_points: Any,
    block_size: int,
    N: int,
    K: int,
    is_symmetric: bool,
    /,
) -> None:
    """MatMulNBits' 2-bit B, scales and zero points of `src` [K, N], written in place."""
    _quantize_nbits(2, (dst, src, scale, zero_points, block_size, N, K, is_symmetric))


def quantize_matmul_4bits(
    dst: Array,
    src: Any,
    scale: Array,
    zero_points: Any,
    block_size: int,
    N: int,
    K: int,
    is_symmetric: bool,
    /,
) -> None:
    """MatMulNBits' 4-bit B, scales and zero points of `src` [K, N], written in place."""
    _quantize_nbits(4, (dst, src, scale, zero_points, block_size, N, K, is_symmetric))


def quantize_matmul_8bits(
    dst: Array,
    src: Any,
    scale: Array,
    zero_points: Any,
    block_size: int,
    N: int,
    K: int,
    is_symmetric: bool,
    /,
) -> None:
    """MatMulNBits' 8-bit B, scales and zero points of `src` [K, N], written in place."""
    _quantize_nbits(8, (dst, src, scale, zero_points, block_size, N, K, is_symmetric))


# ---- QDQ (DequantizeLinear's blocked layout) ----


def _quantize_qdq(args: tuple[Any, ...], single_bits: int) -> bool:
    """4-bit codes of `src` [K, N] blocked along K, row-major two a byte, with scales
    [K blocks, N] and zero points packed the same way; signed codes when symmetric."""
    dst, src, scale, zero_points, block_size, n, k, is_symmetric = args
    block, n, k = _int(block_size, "block_size"), _int(n, "N"), _int(k, "K")
    symmetric = _flag(is_symmetric, "is_symmetric")
    if block <= 0 or n <= 0 or k <= 0:
        raise RuntimeError("QDQ blockwise quantization shape exceeds the int32 index range.")
    dtype, k_blocks = _float_type(src, scale), -(-k // block)
    out = _output(dst, np.uint8, -(-k * n // 2), "dst")
    scales_out = _output(scale, dtype, k_blocks * n, "scale")
    zp_out = _zero_point_output(zero_points, symmetric, -(-k_blocks * n // 2))
    w = _input(src, dtype, k * n, "src").reshape(k, n).astype(np.float32)
    blocks = np.pad(w, ((0, k_blocks * block - k), (0, 0)), mode="edge").reshape(k_blocks, -1, n)
    lo, hi = _ranges(blocks, axis=1)
    s, zp = _block_params(lo, hi, 4, symmetric, dtype)
    q = _round_half_away(blocks * _reciprocal(s)[:, None, :])
    if zp is None:  # signed codes, stored as their two's complement bits
        codes = np.clip(q, -8, 7).astype(np.int8).view(np.uint8)
    else:
        codes = np.clip(q + zp.astype(np.float32)[:, None, :], 0, 15).astype(np.uint8)
    _write_codes(out, codes.reshape(-1)[: k * n], n, single_bits)
    scales_out[: k_blocks * n] = s.reshape(-1)
    if zp is not None and zp_out is not None:
        _write_codes(zp_out, zp.reshape(-1), n, single_bits)
    return symmetric


def quantize_qdq_matmul_2bits(
    dst: Array,
    src: Any,
    scale: Array,
    zero_points: Any,
    block_size: int,
    N: int,
    K: int,
    is_symmetric: bool,
    /,
) -> bool:
    """onnxruntime 1.32's 2-bit QDQ entry point, which writes the 4-bit QDQ layout (4-bit
    codes, scales and zero points) but sets a code that shares its byte with another row or
    column run in 2 bits; True: signed codes. Kept byte for byte (docs/quantization.md)."""
    return _quantize_qdq((dst, src, scale, zero_points, block_size, N, K, is_symmetric), 2)


def quantize_qdq_matmul_4bits(
    dst: Array,
    src: Any,
    scale: Array,
    zero_points: Any,
    block_size: int,
    N: int,
    K: int,
    is_symmetric: bool,
    /,
) -> bool:
    """4-bit QDQ weight [K, N], scales and zero points of `src`, in place; True: signed codes."""
    return _quantize_qdq((dst, src, scale, zero_points, block_size, N, K, is_symmetric), 4)


# ---- MatMulBnb4 ----

_FP4_BOUNDS = np.array(
    [0.00260417, 0.0859375, 0.20833333, 0.29166667, 0.4166667, 0.583333, 0.8333333], np.float32
)
_FP4_CODES = np.array([0, 1, 6, 7, 4, 5, 2, 3], np.uint8)
"""bitsandbytes' FP4: the magnitude's code between the midpoints of its levels (0, 1/192,
1/6, 1/4, 1/3, 1/2, 2/3, 1 of the block's absmax), plus 8 for a negative value."""
_NF4_BOUNDS = np.array(
    [
        *(-0.8480964004993439, -0.6106329262256622, -0.4599952697753906),
        *(-0.33967943489551544, -0.23460740596055984, -0.13791173323988914),
        *(-0.045525018125772476, 0.03979014977812767, 0.1202552504837513),
        *(0.2035212516784668, 0.2920137718319893, 0.3893125355243683),
        *(0.5016634166240692, 0.6427869200706482, 0.8614784181118011),
    ],
    np.float32,
)
"""NF4: code i for a value between midpoints i - 1 and i of the 16 normal-float levels."""


def _bnb4_codes(x: Array, quant_type: int) -> Array:
    """The 4-bit code of each value in [-1, 1] (a midpoint itself takes the lower code;
    NaN takes code 0, as onnxruntime's comparisons give)."""
    nan = np.isnan(x)
    if quant_type == 1:
        codes = np.searchsorted(_NF4_BOUNDS, x, side="left").astype(np.uint8)
    else:
        level = np.searchsorted(_FP4_BOUNDS, np.abs(x), side="left")
        codes = _FP4_CODES[np.minimum(level, 7)] + np.where(x < 0, 8, 0).astype(np.uint8)
    out: Array = np.where(nan, np.uint8(0), codes)
    return out


def quantize_matmul_bnb4(
    dst: Array,
    src: Any,
    absmax: Array,
    block_size: int,
    quant_type: int,
    N: int,
    K: int,
    /,
) -> None:
    """MatMulBnb4's B and absmax of `src` [N, K] (FP4 or NF4 codes, two a byte, the first in
    the high nibble), written in place."""
    block, kind = _int(block_size, "block_size"), _int(quant_type, "quant_type")
    n, k = _int(N, "N"), _int(K, "K")
    if kind not in (0, 1):
        raise RuntimeError("Invalid quant_type, only 0 (FP4) and 1 (NF4) are supported.")
    if block not in _BLOCK_SIZES:
        raise RuntimeError("only block size 16, 32, 64, 128, 256 are supported.")
    if n <= 0 or k <= 0:
        return  # onnxruntime writes nothing
    dtype, size = _float_type(src, absmax), n * k
    blocks_n = -(-size // block)
    out = _output(dst, np.uint8, -(-size // 2), "dst")
    absmax_out = _output(absmax, dtype, blocks_n, "absmax")
    w = _input(src, dtype, size, "src").astype(np.float32)
    blocks = np.pad(w, (0, blocks_n * block - size)).reshape(blocks_n, block)
    peak = np.fmax.reduce(np.abs(blocks), axis=1, initial=np.float32(0))
    scaled = (blocks * _reciprocal(peak)[:, None]).reshape(-1)[:size]
    codes = _bnb4_codes(_pad(scaled, 2, 0), kind)
    out[: codes.size // 2] = (codes[0::2] << 4) | codes[1::2]
    absmax_out[:blocks_n] = peak.astype(dtype)


# ---- MXFP4 for onnxruntime's CUDA MoE GEMM ----


def pack_fp4_weights_for_cuda_moe_gemm(q_weights: Any, N: int, K: int) -> npt.NDArray[np.uint8]:
    """FP4 codes [N, K / 2] (two a byte, low nibble first) re-packed as [K, N / 2] (the
    transposed codes, two a byte along N), flat; the layout onnxruntime's CUDA MoE GEMM reads."""
    n, k = _int(N, "N"), _int(K, "K")
    if n % 2 or k % 2:
        raise ValueError("N and K must be even for FP4 packing")
    if n <= 0 or k <= 0:
        raise ValueError("N and K must be positive")
    packed = np.asarray(q_weights).astype(np.uint8, copy=False)
    if packed.shape != (n, k // 2):
        raise ValueError("q_weights must have shape (N, K / 2)")
    codes = unpack_bits(packed, 4)  # [N, K]
    out: npt.NDArray[np.uint8] = _pack(np.ascontiguousarray(codes.T), 4).reshape(-1)
    return out
