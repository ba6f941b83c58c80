"""2-D products split on numba's worker threads: the conv and GEMM kernels' `matmul`.

In a run with threads, `turnout.sdk.blas_threads.blas_matmul` splits a large product between the
caller and Python helper threads. Each block then waits for a helper to wake and for the GIL
(about 60 us a hand-off on the 2-core VM), so products under ~1 ms gained little or lost
(64x576 @ 576x504, 0.3 ms: 0.97x its serial time). Here a `prange` loop calls numpy's BLAS
(`cblas.gemm_call`, one BLAS thread each) on row or column blocks, on the same numba workers
the im2col and epilogue kernels around it have just used: the same product took 0.69x, and a
3 ms one 0.71x where the helper threads reached 0.79x (interleaved with serial runs, TBB layer).

Outside a threaded run, for other dtypes or layouts, when numpy's BLAS exports no
`cblas_?gemm`, for products under `POOL_SERIAL_MACS`, and for a single row or column (numpy's
GEMV; as GEMM blocks, alexnet's 1x9216 @ 9216x4096 took 2.3x as long), this is `blas_matmul`.

Products the conv kernel would multiply on the register tile without threads (`tile=True`)
stay on it split: each block a call of `sgemm_tile`'s `turnout_sgemm`, rows in whole tiles,
columns in whole blocks. On the 2-core Zen 5 EPYC at 2 threads (one-node sessions, five
alternating processes each) SqueezeNet's 512 -> 1000 1x1 conv at 13x13 took 378-399 us
instead of 422-433 with BLAS's blocks, its 48 -> 192 and 64 -> 256 3x3 convs 89-90 and 138-141
instead of 99 and 156-161 (onnxruntime: 357, 61 and 102).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from turnout.sdk.blas_threads import blas_matmul, run_threads

from .. import cache
from ..cblas import find_gemm, gemm_operand
from ..codegen import numba_array
from . import sgemm_tile

__all__ = ["POOL_SERIAL_MACS", "pool_matmul", "prepare_pool_matmul", "prepare_pool_tile"]

POOL_SERIAL_MACS = 1 << 22
"""Products with fewer multiply-adds (4.2 M, about 0.1 ms) run whole in the caller: a 3.2 M
one took 1.05x its serial time split in two."""

BLOCKS_PER_THREAD = 1
"""Row or column blocks per thread. One each ran 3-15% faster than two (each block packs the
whole of the operand it does not split): 1000x512 @ 512x169 by rows in 661 against 694 us,
512x4608 @ 4608x49 in 1234 against 1446, 128x1152 @ 1152x784 by columns in 992 against 1115."""

_ALIGN = 16  # column blocks are multiples of 16 elements (a 64-byte line of float32)

_IMPORTS = "from turnout_numba.cblas import gemm_call\n"
_SPLIT = (
    _IMPORTS
    + """
def _pool_matmul(address, ilp64, a, b, c, blocks, by_columns):
    m, k = a.shape
    n = b.shape[1]
    size = a.itemsize
    lda = a.strides[0] // size
    ldb = b.strides[0] // size
    ldc = c.strides[0] // size
    if by_columns:
        step = (n + blocks - 1) // blocks
        step = (step + {align} - 1) // {align} * {align}
        count = (n + step - 1) // step
        for i in prange(count):
            j = i * step
            gemm_call(address, ilp64, m, min(n, j + step) - j, k, a, lda, b[:, j:], ldb,
                      c[:, j:], ldc, 0.0)
    else:
        step = (m + blocks - 1) // blocks
        count = (m + step - 1) // step
        for i in prange(count):
            r = i * step
            gemm_call(address, ilp64, min(m, r + step) - r, n, k, a[r:], lda, b, ldb,
                      c[r:], ldc, 0.0)
"""
)

_TILE_SPLIT = """\
def _pool_tile(a, b, c, blocks, by_columns):
    # {tag}
    m, k = a.shape
    n = b.shape[1]
    lda = a.strides[0] // 4
    ldb = b.strides[0] // 4
    ldc = c.strides[0] // 4
    if by_columns:
        step = ((n + blocks - 1) // blocks + {block} - 1) // {block} * {block}
        for i in prange((n + step - 1) // step):
            j = i * step
            a.turnout_sgemm(lda, b[:, j:], ldb, c[:, j:], ldc, m, min(n, j + step) - j, k)
    else:
        step = ((m + blocks - 1) // blocks + {rows} - 1) // {rows} * {rows}
        for i in prange((m + step - 1) // step):
            r = i * step
            a[r:].turnout_sgemm(lda, b, ldb, c[r:], ldc, min(m, r + step) - r, n, k)
"""

_KERNELS: dict[np.dtype[Any], Any] = {}  # by dtype: its `.name` costs microseconds
_TILE_KERNEL: list[Any] = []


def prepare_pool_matmul(dtype: np.dtype[Any]) -> None:
    """Compile (or load) the split kernel for `dtype` now, where numpy's BLAS has its GEMM:
    called when a session with threads builds a kernel that multiplies, so the first run
    compiles nothing."""
    dt = np.dtype(dtype)
    if find_gemm(dt) is not None:
        _kernel(dt)


def _kernel(dtype: np.dtype[Any]) -> Any:
    kern = _KERNELS.get(dtype)
    if kern is None:
        ro = numba_array(dtype, 2, readonly=True, layout="A")
        out = numba_array(dtype, 2, readonly=False, layout="A")
        i64 = types.int64
        sig = types.void(i64, types.boolean, ro, ro, out, i64, types.boolean)
        fn = cache.load_source(_SPLIT.format(align=_ALIGN), "pool_matmul")._pool_matmul
        kern = _KERNELS[dtype] = cache.jit(fn, [sig], parallel=True, imports=_IMPORTS)
    cache.note_used(kern)
    return kern


def prepare_pool_tile() -> None:
    """Compile (or load) the split tile kernel now (see `prepare_pool_matmul`)."""
    if sgemm_tile.AVAILABLE:
        _tile_kernel()


def _tile_kernel() -> Any:
    if not _TILE_KERNEL:
        f32 = np.dtype(np.float32)
        ro = numba_array(f32, 2, readonly=True, layout="A")
        out = numba_array(f32, 2, readonly=False, layout="A")
        sig = types.void(ro, ro, out, types.int64, types.boolean)
        text = _TILE_SPLIT.format(tag=sgemm_tile.TAG, block=sgemm_tile.BLOCK, rows=sgemm_tile.ROWS)
        fn = cache.load_source(text, "pool_tile")._pool_tile
        _TILE_KERNEL.append(cache.jit(fn, [sig], parallel=True))
    cache.note_used(_TILE_KERNEL[0])
    return _TILE_KERNEL[0]


def pool_matmul(a: Any, b: Any, out: Any = None, tile: bool = False) -> Any:
    """`np.matmul(a, b, out=out)` for 2-D operands, split on numba's threads in a threaded run
    when large enough (see the module docstring); otherwise `blas_matmul`. `tile`: the caller
    has checked that the product suits the register tile (float32 on a host with it, rows in
    unit stride); its blocks then multiply on the tile instead of BLAS."""
    threads = run_threads()
    if threads <= 1 or a.ndim != 2 or b.ndim != 2:
        return blas_matmul(a, b, out=out)
    m, k = a.shape
    n = b.shape[1]
    dt = a.dtype
    # one row or column: numpy multiplies by GEMV, where a GEMM would copy B into its panels
    gemm = find_gemm(dt) if m * k * n >= POOL_SERIAL_MACS and min(m, n) > 1 else None
    if gemm is None or b.dtype != dt or b.shape[0] != k:
        return blas_matmul(a, b, out=out)
    if out is None:
        out = np.empty((m, n), dt)
    elif (
        out.dtype != dt
        or out.shape != (m, n)
        or not gemm_operand(out)
        or np.may_share_memory(out, a)
        or np.may_share_memory(out, b)
    ):
        return blas_matmul(a, b, out=out)
    if not (gemm_operand(a) and gemm_operand(b)):
        return blas_matmul(a, b, out=out)
    blocks = threads * BLOCKS_PER_THREAD
    # each block packs all of the operand it does not split: split the bigger side
    # (1000x512 @ 512x169 by rows 661 us, by columns 820; 64x576 @ 576x3136: 1398 and 1084)
    by_columns = n >= m
    if tile and sgemm_tile.AVAILABLE and dt == np.float32:
        _tile_kernel()(a, b, out, blocks, by_columns)
    else:
        _kernel(dt)(gemm.address, gemm.ilp64, a, b, out, blocks, by_columns)
    return out
