"""Float32 matrix products on the register tile (`sgemm_tile`) for Gemm and MatMul.

The tile was written for conv products, but a dense layer's product is the same shape of
work: A's rows (a batch of activations) times a packed constant B. On the 2-core Zen 5 EPYC
(AVX-512, 1 thread, products alone) it ran 1.1-2.2x OpenBLAS's GMAC/s from 4 rows up:
64 x 1024 x 1024 104 against 78, 128 x 768 x 3072 (a BERT feed-forward) 111 against 92,
8 x 1024 x 1024 45 against 20, 200 x 128 x 128 122 against 105. One row stays with the
compiled GEMV of `gemm.py`.

With threads the columns of B are split into one range per thread, each a whole number of
the tile's column blocks; each thread packs its own blocks of B.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from turnout.sdk.blas_threads import run_threads

from .. import cache
from ..codegen import numba_array
from ..registry import BuildContext, SizedKernel
from . import sgemm_tile
from .pool_matmul import POOL_SERIAL_MACS, pool_matmul

__all__ = [
    "MAX_K",
    "MIN_ROWS",
    "matmul",
    "tile_matmul_applies",
    "tile_matmul_available",
    "tile_matmul_kernel",
]

MIN_ROWS = 4
"""The fewest rows of A a product takes the tile with (4 rows: 26 against OpenBLAS's 16
GMAC/s at 1024 x 1024; a tile computes `sgemm_tile.ROWS` rows whatever M is)."""

MAX_K = 9216
"""The longest inner dimension measured here (64 x 9216 x 512: 89 against OpenBLAS's 81
GMAC/s); convs have their own limit (`conv.TILE_MAX_K`)."""

_SOURCE = """\
from numba import prange


def _tile_matmul(a, b, c, parts):
    # {tag}
    m, k = a.shape
    n = b.shape[1]
    step = ((n + parts - 1) // parts + {block} - 1) // {block} * {block}
    for p in prange(parts):
        j0 = p * step
        j1 = min(n, j0 + step)
        if j0 < j1:
            a.turnout_sgemm(k, b[:, j0:], n, c[:, j0:], n, m, j1 - j0, k)
"""


def tile_matmul_available(dt: np.dtype[Any]) -> bool:
    """Whether products of `dt` may run on the tile here: float32, on a host with the AVX-512
    tile (the 8-lane AVX2 one ran even with OpenBLAS on conv products)."""
    return sgemm_tile.AVAILABLE and sgemm_tile.LANES >= 16 and dt == np.float32


def tile_matmul_applies(dt: np.dtype[Any], rows: int, k: int, b_contiguous: bool) -> bool:
    """Whether a product of `rows` rows of A by a (k, N) B runs on the tile: where it is
    available (`tile_matmul_available`), from `MIN_ROWS` rows, K up to `MAX_K`, a
    C-contiguous B."""
    return tile_matmul_available(dt) and rows >= MIN_ROWS and 0 < k <= MAX_K and b_contiguous


def tile_matmul_kernel(ctx: BuildContext) -> SizedKernel:
    """`k(work, a, b, c, parts)`: c = a @ b (float32, C-contiguous (M, K), (K, N), (M, N)),
    B's columns in `parts` ranges, shared between the threads in the parallel variant."""
    text = _SOURCE.format(tag=sgemm_tile.TAG, block=sgemm_tile.BLOCK)
    fn = cache.load_source(text, "tile_matmul")._tile_matmul
    f32 = np.dtype(np.float32)
    mat = numba_array(f32, 2, readonly=True, layout="C")
    out = numba_array(f32, 2, readonly=False, layout="C")
    return ctx.jit(fn, [types.void(mat, mat, out, types.int64)])


def matmul(tile: SizedKernel | None, a: Any, b: Any) -> Any:
    """a @ b (2-D) into a fresh array: on the register tile (`tile`, from
    `tile_matmul_kernel`, None where unavailable) where `tile_matmul_applies`, else
    `pool_matmul`. As `pool_matmul`, the run's threads share a product of `POOL_SERIAL_MACS`
    or more (BLAS held to one thread for the rest of the run); a smaller one runs whole on the
    caller's thread. Shared by Gemm/MatMul and the recurrent ops' input projection."""
    rows, k = a.shape
    if tile is not None and tile_matmul_applies(a.dtype, rows, k, b.flags.c_contiguous):
        n = b.shape[1]
        y = np.empty((rows, n), a.dtype)
        threads = run_threads()
        if threads > 1 and rows * k * n >= POOL_SERIAL_MACS:
            tile.parallel(a, b, y, threads)
        else:
            tile.serial(a, b, y, 1)
        return y
    return pool_matmul(a, b)
