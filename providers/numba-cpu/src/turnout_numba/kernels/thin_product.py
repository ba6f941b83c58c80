"""Matrix products with few columns (`THIN_MAX_COLUMNS`) as dot products along K.

A conv whose output has a few pixels (an audio model's STFT conv over 3 frames, a recognizer's
1-D convs, a detector's last stages) multiplies its weights (M x K) by an im2col panel of
1-12 columns. OpenBLAS packs the whole weight matrix into its own layout on every such call
and then uses a kernel built for wide panels: on the 2-core EPYC (AVX2, 1 thread) 258 x 256 x
3 ran at 8.6 GMAC/s, 23 us, most of it packing. The register tile of `sgemm_tile`, which
vectorizes along N, wastes most of its lanes at that width.

Here the product runs along K instead: the panel's columns are copied to contiguous rows
once, and each output is a dot product of a weight row with a column. `ROWS` weight rows and
up to three columns are taken at once, so each loaded weight serves up to three columns and
each loaded column `ROWS` rows, with the sums in registers; LLVM vectorizes the K loop
(numba's `fastmath` reassoc: the sum's order changes, as it does in BLAS). The weights are
read once per three columns, where they were packed: 258 x 256 x 3 in 5.6 us (35 GMAC/s).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ..cache import file_digest

__all__ = ["ROWS", "TAG", "THIN_MAX_COLUMNS", "thin_product", "thin_rows"]

THIN_MAX_COLUMNS = 12
"""The widest panel (columns of B, output pixels of a conv band) multiplied here rather than
by BLAS. On the 2-core EPYC (1 thread, products alone) this product ran at 30-36 GMAC/s from
1 to 24 columns on the large shapes; OpenBLAS ran 8-15 GMAC/s at 2-6 columns, 24-27 at 8-12
and 33-37 from 16 (258 x 256, 128 x 387, 64 x 384, 32 x 144)."""

ROWS = 4
"""Weight rows per block: with three columns, 12 vector sums, within AVX2's 16 registers."""

TAG = f"thin product {file_digest(__file__)}"
"""Written into the source of every kernel that calls `thin_product`: numba's cache checks
only a kernel's own source, and would serve one compiled with an older product."""

_FAST = {"reassoc", "contract"}


@numba.njit(fastmath=_FAST)
def _columns3(w: Any, t: Any, out: Any, c: int, zero: Any) -> None:
    m, k = w.shape
    t0, t1, t2 = t[c], t[c + 1], t[c + 2]
    j = 0
    while j + 4 <= m:
        w0, w1, w2, w3 = w[j], w[j + 1], w[j + 2], w[j + 3]
        s00 = s01 = s02 = s10 = s11 = s12 = zero
        s20 = s21 = s22 = s30 = s31 = s32 = zero
        for r in range(k):
            x0, x1, x2 = t0[r], t1[r], t2[r]
            v = w0[r]
            s00 += v * x0
            s01 += v * x1
            s02 += v * x2
            v = w1[r]
            s10 += v * x0
            s11 += v * x1
            s12 += v * x2
            v = w2[r]
            s20 += v * x0
            s21 += v * x1
            s22 += v * x2
            v = w3[r]
            s30 += v * x0
            s31 += v * x1
            s32 += v * x2
        out[j, c], out[j, c + 1], out[j, c + 2] = s00, s01, s02
        out[j + 1, c], out[j + 1, c + 1], out[j + 1, c + 2] = s10, s11, s12
        out[j + 2, c], out[j + 2, c + 1], out[j + 2, c + 2] = s20, s21, s22
        out[j + 3, c], out[j + 3, c + 1], out[j + 3, c + 2] = s30, s31, s32
        j += 4
    for i in range(j, m):
        wi = w[i]
        s0 = s1 = s2 = zero
        for r in range(k):
            v = wi[r]
            s0 += v * t0[r]
            s1 += v * t1[r]
            s2 += v * t2[r]
        out[i, c], out[i, c + 1], out[i, c + 2] = s0, s1, s2


@numba.njit(fastmath=_FAST)
def _columns2(w: Any, t: Any, out: Any, c: int, zero: Any) -> None:
    m, k = w.shape
    t0, t1 = t[c], t[c + 1]
    j = 0
    while j + 4 <= m:
        w0, w1, w2, w3 = w[j], w[j + 1], w[j + 2], w[j + 3]
        s00 = s01 = s10 = s11 = s20 = s21 = s30 = s31 = zero
        for r in range(k):
            x0, x1 = t0[r], t1[r]
            v = w0[r]
            s00 += v * x0
            s01 += v * x1
            v = w1[r]
            s10 += v * x0
            s11 += v * x1
            v = w2[r]
            s20 += v * x0
            s21 += v * x1
            v = w3[r]
            s30 += v * x0
            s31 += v * x1
        out[j, c], out[j, c + 1] = s00, s01
        out[j + 1, c], out[j + 1, c + 1] = s10, s11
        out[j + 2, c], out[j + 2, c + 1] = s20, s21
        out[j + 3, c], out[j + 3, c + 1] = s30, s31
        j += 4
    for i in range(j, m):
        wi = w[i]
        s0 = s1 = zero
        for r in range(k):
            v = wi[r]
            s0 += v * t0[r]
            s1 += v * t1[r]
        out[i, c], out[i, c + 1] = s0, s1


@numba.njit(fastmath=_FAST)
def _columns1(w: Any, t: Any, out: Any, c: int, zero: Any) -> None:
    m, k = w.shape
    t0 = t[c]
    j = 0
    while j + 4 <= m:
        w0, w1, w2, w3 = w[j], w[j + 1], w[j + 2], w[j + 3]
        s0 = s1 = s2 = s3 = zero
        for r in range(k):
            x = t0[r]
            s0 += w0[r] * x
            s1 += w1[r] * x
            s2 += w2[r] * x
            s3 += w3[r] * x
        out[j, c], out[j + 1, c], out[j + 2, c], out[j + 3, c] = s0, s1, s2, s3
        j += 4
    for i in range(j, m):
        wi = w[i]
        s = zero
        for r in range(k):
            s += wi[r] * t0[r]
        out[i, c] = s


@numba.njit(fastmath=_FAST)
def thin_product(w: Any, b: Any, out: Any, zero: Any) -> None:
    """out (M, N) = w (M, K, rows contiguous) @ b (K, N, any strides), N at most a few
    columns (`THIN_MAX_COLUMNS`); `zero` is the dtype's 0 (the sums' type). Called from
    generated kernels (`conv_bands`), which carry `TAG` in their source."""
    k = w.shape[1]
    n = b.shape[1]
    t = np.empty((n, k), w.dtype)
    for r in range(k):
        for c in range(n):
            t[c, r] = b[r, c]
    thin_rows(w, t, out, zero)


@numba.njit(fastmath=_FAST)
def thin_rows(w: Any, t: Any, out: Any, zero: Any) -> None:
    """`thin_product` with B given transposed: out (M, N) = w (M, K) @ t (N, K).T, rows of
    both contiguous (a conv band gathered a pixel per row, `conv_bands`)."""
    n = t.shape[0]
    c = 0
    while c + 3 <= n:
        _columns3(w, t, out, c, zero)
        c += 3
    if n - c == 2:
        _columns2(w, t, out, c, zero)
    elif n - c == 1:
        _columns1(w, t, out, c, zero)
