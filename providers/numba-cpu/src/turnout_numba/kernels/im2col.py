"""im2col in output-pixel tiles, for the GEMM path of Conv/FusedConv.

A whole-image column matrix is (C*KH*KW, OH*OW): 7-14 MB at ResNet's and DenseNet's 56x56
stages, so im2col wrote it to memory and the GEMM read it back from there, at about half the
speed BLAS reaches on a cache-resident panel. Instead the input is padded once (`pad_kernel`,
the `window.Window` layout: each plane copied into a zeroed buffer with its guard values or
split by stride phase; the buffer is kept between runs, its padding zeroed once) and the
columns are then gathered one band of output rows at a time (`tile_kernel`) into a small
buffer that the band's GEMM reads while it is still in L2. An image gathered as one band pads
each plane as it goes instead (`inline`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from .. import cache
from ..codegen import numba_array
from ..registry import SizedKernel
from .epilogue import CTOR
from .window import copy_lines, geo_lines, window_arg_types

__all__ = [
    "MIN_TILE",
    "TILE_BYTES",
    "WHOLE_BYTES",
    "fused_band",
    "pad_kernel",
    "tile_kernel",
    "tile_lines",
    "tile_rows",
]

TILE_BYTES = 1 << 20
"""The column panel and output band of one GEMM when the whole image's are too big: a core's
L2 here, so that they stay cached from the gather through the GEMM to the epilogue. Swept at
the benchmark models' shapes (1 thread, 256 KB to 1 MB bands against one whole-image GEMM):
at 56x56 and 80x80 a band ran the conv 15-60% faster than the whole 7-15 MB panel (densenet's
3x3 3.6 against 9.9 ms), 1 MB bands were the best or within noise of it."""

WHOLE_BYTES = 4 << 20
"""Up to this size the whole image's column panel and output are one GEMM: at 28x28 and 40x40
(3.5-4 MB) bands gained nothing or lost up to 7% (BLAS's per-call cost, narrower GEMMs)."""

MIN_TILE = 256
"""The fewest output pixels a band's GEMM gets (fewer ran slower than the cache saves)."""

_PAD = """\
def _pad(x, out, offs, cols, lo, hi, geo):
{geo}    c_ = x.shape[0]
    for c in prange(c_):
        src = x[c]
        buf = out[c]
{copy}"""

_TILE_LOOP = """\
c_ = planes.shape[0]
taps = offs.shape[0]
kw = lo.shape[0]
n = b - a
for c in {loop}(c_):
    src = planes[c]
{inline}    s = src
    for t in range(taps):
        dst = col[c * taps + t]
        ot = offs[t]
        if flat:
            kj = t % kw
            lt = lo[kj]
            ht = hi[kj]
            tt = s[ot + a :]
            cc = cols[a:]
            for j in range(n):
                cj = cc[j]
                dst[j] = tt[j] if cj >= lt and cj < ht else zero
        else:  # row by row from pixel a's; the first and the last may be partial rows
            r = a // rlen
            j0 = a - r * rlen
            done = 0
            while done < n:
                cnt = min(rlen - j0, n - done)
                tt = s[r * rstep + ot + j0 :]
                d = dst[done : done + cnt]
                for j in range(cnt):
                    d[j] = tt[j]
                done += cnt
                r += 1
                j0 = 0
"""

_INLINE = """\
    if inline and not direct:
        buf = np.zeros(blen, planes.dtype)
{copy}        src = buf
"""


def tile_lines(indent: int, loop: str, inline: bool) -> str:
    """The statements gathering the columns of output pixels [a, b) of `planes` into `col`
    (names as in `tile_kernel`'s arguments; `zero` and the `geo` names defined), channels in a
    `loop` ("prange" or "range") loop; with `inline`, the padding-as-it-gathers branch too.
    Shared by the tile kernel and the fused band kernel (`conv_bands`)."""
    body = _TILE_LOOP.format(loop=loop, inline=_INLINE.format(copy=copy_lines(8)) if inline else "")
    pad = " " * indent
    return "".join(f"{pad}{line}\n" if line else "\n" for line in body.splitlines())


_TILE = (
    "def _im2col_tile(planes, col, offs, cols, lo, hi, geo, a, b, inline):\n"
    "    zero = {ctor}(0)\n{geo}{tile}"
)

_KERNELS: dict[tuple[str, str, bool], SizedKernel] = {}


def _compiled(kind: str, dtype: np.dtype[Any], parallel: bool) -> SizedKernel:
    key = (kind, dtype.name, parallel)
    kern = _KERNELS.get(key)
    if kern is None:
        ro2 = numba_array(dtype, 2, readonly=True, layout="C")
        if kind == "pad":
            text = _PAD.format(ctor=CTOR[dtype.name], geo=geo_lines(4), copy=copy_lines(8))
            fn = cache.load_source(text, "im2col_pad")._pad
            out = numba_array(dtype, 2, readonly=False, layout="C")
            sig = types.void(ro2, out, *window_arg_types())
        else:
            tile = tile_lines(4, "prange", inline=True)
            text = _TILE.format(ctor=CTOR[dtype.name], geo=geo_lines(4), tile=tile)
            fn = cache.load_source(text, "im2col_tile")._im2col_tile
            out = numba_array(dtype, 2, readonly=False, layout="C")
            i64 = types.int64
            sig = types.void(ro2, out, *window_arg_types(), i64, i64, types.boolean)
        kern = _KERNELS[key] = SizedKernel(fn, [sig], parallel)
    cache.note_used(kern.serial, kern.parallel)  # memoized: the session still uses it
    return kern


def pad_kernel(dtype: np.dtype[Any], parallel: bool) -> SizedKernel:
    """`k(work, x2, out2, *window.args())`: each plane of x2 (C, H*W) into out2 (C, blen) as
    the plan lays it out. Only the input's positions are written: out2 is zeroed once, when it
    is made, and its padding stays zero for every later image (the conv keeps the buffer
    between runs; zeroing it each time was a fifth of this pass). Not needed when the plan is
    `direct`."""
    return _compiled("pad", dtype, parallel)


def tile_kernel(dtype: np.dtype[Any], parallel: bool) -> SizedKernel:
    """`k(work, src2, col2, *window.args(), a, b, inline)`: the columns of output pixels
    [a, b) (any range: a band may start or end inside a row) into the C-contiguous
    (C*KH*KW, b - a) `col2` (a flat view runs 1.6x slower at 7x7: LLVM's loops over its row
    slices vectorize worse).
    `src2` is the padded planes (or the input itself when the plan is `direct`); with `inline`
    it is the input, each plane padded into a small buffer as it is gathered (one band for the
    whole image: a separate padding pass would only add a write and a read of the input)."""
    return _compiled("tile", dtype, parallel)


def tile_rows(pixel_bytes: int, out_w: int, out_h: int, least: int = MIN_TILE) -> int:
    """Output rows per band, for a GEMM reading and writing `pixel_bytes` a pixel (its column
    and its outputs): all rows when the whole image fits in `WHOLE_BYTES`, else as many as fill
    `TILE_BYTES`, and at least `least` pixels (a narrower GEMM runs slower than the cache
    saves)."""
    if pixel_bytes * out_w * out_h <= WHOLE_BYTES:
        return out_h
    pixels = max(TILE_BYTES // max(1, pixel_bytes), least)
    return max(1, min(out_h, -(-pixels // max(1, out_w))))


def fused_band(pixel_bytes: int, out_w: int, out_h: int, threads: int) -> int:
    """Output pixels per band of the threaded fused kernel (`conv_bands`), whole rows: no more
    than fill `TILE_BYTES` (each worker's columns stay in its core's cache) nor than give two
    bands per thread (a late worker still takes a share), and at least half `MIN_TILE`; then
    evened out over the bands (13 rows as 10 + 3 left one worker idle most of the time).
    0 where that gives fewer bands than threads (the split product serves the image), or with
    one thread."""
    if threads < 2:
        return 0
    width = max(1, out_w)
    cache_rows = max(1, TILE_BYTES // max(1, pixel_bytes) // width)
    share_rows = -(-out_h // (2 * threads))
    least_rows = -(-(MIN_TILE // 2) // width)
    rows = max(least_rows, min(cache_rows, share_rows))
    count = -(-out_h // rows)
    if count < threads:
        return 0
    return -(-out_h // count) * out_w
