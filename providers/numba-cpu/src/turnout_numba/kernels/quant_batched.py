"""Batched 8-bit products (MatMulInteger, QLinearMatMul with an N-D B): every matrix of the
batch in one compiled call.

A transformer quantized in QOperator or QDQ form multiplies activations by activations
(attention scores Q.K^T, probabilities times V): small matrices (64 x 64 per head), many of
them, B different every run. Packing B for the GEMM of `quant_gemm`/`quant_vnni` per matrix and
calling it per batch index costs more than the products. Here one parallel loop runs over
(matrix, row of A): the row's int32 accumulator gets `(a[k] - a_zp) * b[k, :]` for each k, a
contiguous run of B's row k that vectorizes, uint8/int8 read as they are; B's zero point
(per tensor or per column) comes off at the end, `sum_k (a_k - az)(b_kj - bz_j) =
sum_k (a_k - az) b_kj - bz_j sum_k (a_k - az)`, exact in int32 (wrapping as onnxruntime's
int32 sums do). The store is `quant_gemm`'s: the sum (`int`), onnxruntime's requantization
(`requant`, bit-equal) or `float32(sum) * multiplier + bias` (`scale`).

Where every partial sum is below 2**24 in magnitude (K times the largest |a - a_zp| times the
largest |b - b_zp| the types allow: K <= 258 for 8-bit values, a head's width), the products
run as float32 matrix products instead (numpy's BLAS): every product and partial sum is an
integer float32 holds exactly, so the result is the exact sum whatever the summation order,
and the store reads it as int32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from ..codegen import numba_array
from ..registry import BuildContext, SizedKernel
from .quant_gemm import Params, int_range

__all__ = ["BatchedProduct"]

Array = np.ndarray[Any, Any]

_VARIANTS = {"int": 0, "requant": 1, "scale": 2}

EXACT_FLOAT32 = 2**24
"""Integers below this magnitude, and sums of them that stay below it, are exact in float32."""


def _batched(
    a: Any, az: Any, azr: Any, b: Any, bz: Any, bzc: Any, y: Any,
    mult: Any, mr: Any, mc: Any, bias: Any, br: Any, bc: Any, zp: Any, zr: Any, zc: Any,
    lo: Any, hi: Any, variant: Any,
) -> None:  # pragma: no cover - compiled by numba  # fmt: skip
    """y[t] = store(matmul(a[t] - az, b[t] - bz)) for each matrix t."""
    nb, m_, k_ = a.shape
    n_ = b.shape[2]
    for task in prange(nb * m_):
        t = task // m_
        i = task - t * m_
        ar = a[t, i]
        bt = b[t]
        z = np.int32(az[i * azr])
        acc = np.zeros(n_, np.int32)
        asum = np.int32(0)
        for k in range(k_):
            av = np.int32(ar[k]) - z
            asum += av
            row = bt[k]
            for j in range(n_):
                acc[j] += av * np.int32(row[j])
        yr = y[t, i]
        for j in range(n_):
            s = acc[j] - np.int32(bz[j * bzc]) * asum
            if variant == 0:
                yr[j] = s
            elif variant == 1:
                q = zp[i * zr + j * zc]
                v = np.float32(s + bias[i * br + j * bc]) * mult[i * mr + j * mc]
                v = max(v, np.float32(lo - q))
                v = min(v, np.float32(hi - q))
                v = (v + np.float32(12582912.0)) - np.float32(12582912.0)
                yr[j] = np.int32(v) + q
            else:
                yr[j] = np.float32(s) * mult[i * mr + j * mc] + np.float32(bias[i * br + j * bc])


def _finish(
    acc: Any, y: Any, mult: Any, mr: Any, mc: Any, bias: Any, br: Any, bc: Any, zp: Any,
    zr: Any, zc: Any, lo: Any, hi: Any, variant: Any,
) -> None:  # pragma: no cover - compiled by numba  # fmt: skip
    """y[t] = store(acc[t]), acc holding exact integer sums as float32."""
    nb, m_, n_ = acc.shape
    for task in prange(nb * m_):
        t = task // m_
        i = task - t * m_
        ar = acc[t, i]
        yr = y[t, i]
        if variant == 1 and mc == 0 and bc == 0 and zc == 0:  # one multiplier a row: vectorizes
            q = zp[i * zr]
            b = bias[i * br]
            s_ = mult[i * mr]
            flo = np.float32(lo - q)
            fhi = np.float32(hi - q)
            for j in range(n_):
                v = np.float32(np.int32(ar[j]) + b) * s_
                v = max(v, flo)
                v = min(v, fhi)
                v = (v + np.float32(12582912.0)) - np.float32(12582912.0)
                yr[j] = np.int32(v) + q
            continue
        for j in range(n_):
            s = np.int32(ar[j])
            if variant == 0:
                yr[j] = s
            elif variant == 1:
                q = zp[i * zr + j * zc]
                v = np.float32(s + bias[i * br + j * bc]) * mult[i * mr + j * mc]
                v = max(v, np.float32(lo - q))
                v = min(v, np.float32(hi - q))
                v = (v + np.float32(12582912.0)) - np.float32(12582912.0)
                yr[j] = np.int32(v) + q
            else:
                yr[j] = np.float32(s) * mult[i * mr + j * mc] + np.float32(bias[i * br + j * bc])


def _widest(dt: np.dtype[Any], zero: Array) -> int:
    """The largest |v - zero point| values of type `dt` can have."""
    lo, hi = int_range(dt)
    if zero.size == 1:
        z = int(zero[0])
        return max(hi - z, z - lo)
    z64 = zero.astype(np.int64)
    return int(max(np.max(hi - z64), np.max(z64 - lo)))


class BatchedProduct:
    """The compiled batched product for one node's A, B and output types and store."""

    def __init__(
        self, ctx: BuildContext, a: Any, b: Any, variant: str, out: Any, bias: Any = np.int32
    ) -> None:
        self.out = np.dtype(out)
        self.variant = _VARIANTS[variant]
        self.lo, self.hi = int_range(self.out) if variant == "requant" else (0, 0)
        i32 = numba_array(np.dtype(np.int32), 1, readonly=True, layout="C")
        i64 = types.int64
        sig = types.void(
            numba_array(np.dtype(a), 3, readonly=True, layout="C"), i32, i64,
            numba_array(np.dtype(b), 3, readonly=True, layout="C"), i32, i64,
            numba_array(self.out, 3, readonly=False, layout="C"),
            numba_array(np.dtype(np.float32), 1, readonly=True, layout="C"), i64, i64,
            numba_array(np.dtype(bias), 1, readonly=True, layout="C"), i64, i64,
            i32, i64, i64, types.int32, types.int32, types.int64,
        )  # fmt: skip
        self.kernel: SizedKernel = ctx.jit(_batched, [sig])
        self.a_type, self.b_type = np.dtype(a), np.dtype(b)
        f32 = numba_array(np.dtype(np.float32), 3, readonly=True, layout="C")
        sig_f = types.void(
            f32, numba_array(self.out, 3, readonly=False, layout="C"),
            numba_array(np.dtype(np.float32), 1, readonly=True, layout="C"), i64, i64,
            numba_array(np.dtype(bias), 1, readonly=True, layout="C"), i64, i64,
            i32, i64, i64, types.int32, types.int32, types.int64,
        )  # fmt: skip
        self.finish: SizedKernel = ctx.jit(_finish, [sig_f])

    def __call__(
        self,
        a3: Array,
        a_zero: Array,
        b3: Array,
        b_zero: Array,
        y3: Array,
        params: tuple[Params, Params, Params],
    ) -> None:
        """y3 (T, M, N) from a3 (T, M, K) and b3 (T, K, N), all C-contiguous; `a_zero` is 1 or
        M int32 values (per row), `b_zero` 1 or N (per column)."""
        mult, bias, zp = params
        k = a3.shape[2]
        if k * _widest(self.a_type, a_zero) * _widest(self.b_type, b_zero) < EXACT_FLOAT32:
            af = np.subtract(a3, a_zero.reshape(-1, 1), dtype=np.float32)
            bf = np.subtract(b3, b_zero.reshape(1, -1), dtype=np.float32)
            acc = np.matmul(af, bf)
            self.finish(
                y3.size, acc, y3, mult.data, mult.r, mult.c, bias.data, bias.r, bias.c,
                zp.data, zp.r, zp.c, self.lo, self.hi, self.variant,
            )  # fmt: skip
            return
        work = a3.size * max(b3.shape[2], 1)
        self.kernel(
            work, a3, a_zero, int(a_zero.size > 1), b3, b_zero, int(b_zero.size > 1), y3,
            mult.data, mult.r, mult.c, bias.data, bias.r, bias.c, zp.data, zp.r, zp.c,
            self.lo, self.hi, self.variant,
        )  # fmt: skip
