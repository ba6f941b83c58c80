"""com.microsoft::DynamicQuantizeLSTM: turnout's kernel (`turnout.sdk.semantics.quantized_lstm`,
which follows onnxruntime step by step) with its integer products multiplied here in int32.

Why: each step multiplies the hidden state's uint8 codes by R's 8-bit codes. The numpy kernel
does it as an exact float matmul (float32 over runs of 258 rows), so at hidden 512 a step reads
4 MB of R a direction (8 MB of float64 before): 40 GEMVs a run of a captcha OCR model, most of
its time (onnxruntime's whole LSTM: 2.3 ms). Here the codes stay 8-bit (1 MB a direction, in
L2) and a GEMV takes about 40 us.

`_code_gemm` multiplies four rows of the weights at a time into int32 accumulators (LLVM
vectorizes the column loop) and applies the weights' zero point at the end:
sum_k (a_k - az)(w_kj - wz_j) = sum_k (a_k - az) w_kj - wz_j sum_k (a_k - az), exact in int32
while rows * 255 * 255 * 2 < 2**31 (beyond, the numpy products run). The sums are the numpy
kernel's exact integers, so the outputs are the same bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from turnout.graph.contrib import DOMAIN
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.quantized_lstm import (
    CodeProducts,
    build_dynamic_quantize_lstm,
)

from .. import cache
from ..codegen import numba_array
from ..registry import BuildContext, numba_kernel

__all__: list[str] = []

Array = np.ndarray[Any, Any]

_MAX_ROWS = ((1 << 31) - 1) // (2 * 255 * 255)
"""Rows of codes whose int32 sums (and zero-point correction) cannot overflow."""


def _code_gemm(a, az, w, wz, out):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    m, rows = a.shape
    n = w.shape[1]
    r4 = rows - rows % 4
    for i in range(m):
        acc = out[i]
        for j in range(n):
            acc[j] = 0
        s = np.int32(0)
        for k in range(0, r4, 4):
            a0 = np.int32(a[i, k]) - az
            a1 = np.int32(a[i, k + 1]) - az
            a2 = np.int32(a[i, k + 2]) - az
            a3 = np.int32(a[i, k + 3]) - az
            s += a0 + a1 + a2 + a3
            w0 = w[k]
            w1 = w[k + 1]
            w2 = w[k + 2]
            w3 = w[k + 3]
            for j in range(n):
                acc[j] += (
                    a0 * np.int32(w0[j])
                    + a1 * np.int32(w1[j])
                    + a2 * np.int32(w2[j])
                    + a3 * np.int32(w3[j])
                )
        for k in range(r4, rows):
            ak = np.int32(a[i, k]) - az
            s += ak
            wk = w[k]
            for j in range(n):
                acc[j] += ak * np.int32(wk[j])
        for j in range(n):
            acc[j] -= s * wz[j]


def _signature(weights: np.dtype[Any]) -> Any:
    i32 = np.dtype(np.int32)
    return types.void(
        numba_array(np.dtype(np.uint8), 2, readonly=True, layout="C"),
        types.int32,
        numba_array(weights, 2, readonly=True, layout="C"),
        numba_array(i32, 1, readonly=True, layout="C"),
        numba_array(i32, 2, readonly=False, layout="C"),
    )


class _Int32Products(CodeProducts):
    """`CodeProducts` in int32 on the 8-bit codes (the numpy ones past `_MAX_ROWS` rows)."""

    def __init__(self) -> None:
        # both weight types: compiled (or loaded) with the kernel, never inside a run
        self._gemm = cache.jit(_code_gemm, [_signature(np.dtype(t)) for t in (np.int8, np.uint8)])

    def prepare(self, q: Array, zp: Array) -> Any:
        if q.dtype not in (np.int8, np.uint8) or q.shape[0] > _MAX_ROWS:
            return super().prepare(q, zp)
        wz = np.ascontiguousarray(
            np.broadcast_to(np.asarray(zp, np.int32).reshape(-1), (q.shape[1],))
        )
        return np.ascontiguousarray(q), wz

    def __call__(self, codes: Array, zp: Any, weights: Any) -> Array:
        if not isinstance(weights, tuple):
            return super().__call__(codes, zp, weights)
        w, wz = weights
        out = np.empty((codes.shape[0], w.shape[1]), np.int32)
        self._gemm(np.ascontiguousarray(codes, np.uint8), np.int32(zp), w, wz, out)
        return out.astype(np.float32)


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    del ctx  # serial: a step's GEMV is ~40 us, under what a parallel launch pays back
    return build_dynamic_quantize_lstm(kn, _Int32Products())


numba_kernel("DynamicQuantizeLSTM", since=1, domain=DOMAIN)(_build)
