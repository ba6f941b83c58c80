"""Convolutions as a sum of shifted products, without im2col.

A KxK stride-1 conv's im2col panel repeats each input value K*K times: at DenseNet's 56x56
stage (128 channels in, 3x3) it is 14 MB written and read back per image, about a third of the
conv's time. Here the image is padded once into rows of width Wp = W + pads (`_PAD`); then
for each tap (ki, kj) the output, computed Wp wide, gets W[:, :, ki, kj] @ the padded image
read from offset (ki * dh) * Wp + kj * dw, a plain strided view, by one BLAS GEMM with beta 1
(`cblas.gemm_call`). The Wp - OW columns past each output row read across the row end; they are
dropped when each band is copied into the output, with the bias, residual Z and activation
applied on the way (`epilogue.activation_lines`). Measured (1 thread, the conv alone, numpy
prototype against the im2col path): 128->32 at 56x56 2.7 against 3.8 ms, 64->64 at 56x56 2.0
against 2.5, 32->32 at 80x80 1.4 against 1.7; at 14x14 even.

On the register tile (`sgemm_tile`, float32 on AVX-512 hosts, `conv._shift_tile`) a band's
taps are one product instead, K = C*KH*KW with the weights as given: row (c, ki, kj) of B is
channel c of the padded image from offset (ki * dh) * Wp + kj * dw, gathered as the tile packs
each block of columns (`turnout_sgemm_rows`). No pass per tap over the band's accumulator (a
BLAS GEMM with beta 1 reads and writes it KH*KW times): 1.07-1.15x the BLAS version's speed
on the zoo's 28-80 wide 3x3 convs (the EPYC, 1 thread: DenseNet's 128 -> 32 at 56x56 2.67
against 3.02 ms, ResNet's 64 -> 64 at 56x56 2.45 against 2.82).

Strided convs run on the tile too: the padded image is written as its SH x SW stride phases
(phase (a, b) holds the padded positions (a + i*SH, b + j*SW), `_phases`), and tap (u, v) of
output (r, c) reads phase (u % SH, v % SW) at (r + u // SH, c + v // SW), at stride 1 again:
the rows of B are the taps' places in their phases, and each product computes OW + (KW-1)*dw
// SW columns an output row. The phases cost one pass over the image (stride 2 by pairs of
columns, which LLVM deinterleaves in vectors). One-node sessions against im2col on the tile
(the EPYC, 1 thread): 64 -> 128 to 20x20 at stride 2 319 against 340 us, 32 -> 64 to 40x40
326-333 against 353-391, 16 -> 32 to 80x80 372 against 410, ResNet's 7x7 stride-2 stem 1140
against 1186-1223, SqueezeNet's 3 -> 64 stem even; at 2 threads 184 against 252 and 179
against 219. Inside YOLO's detector at 2 threads 0.92x a run; at 1 thread even.

The bands of output rows run in a `prange` loop (with threads, one worker a band); each
accumulates in its own rows of a scratch array. Used for group 1 when numpy's BLAS exports
`cblas_?gemm`: on BLAS at stride 1 from `SHIFT_MIN_CHANNELS` input channels (fewer make each
tap's GEMM too thin), on the tile at any stride and with any number (its one product per
band has K = C*KH*KW: the EPYC, 1 thread, one-node sessions against im2col on the tile:
16 -> 16 at 56x56 97 against 132 us, 16 -> 32 at 80x80 332 against 382, 8 -> 16 at 112x112
197 against 249; SqueezeNet's 16 -> 64 at 55x55 301 against 311, a run of the model 0.96x).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types

from .. import cache
from ..codegen import numba_array
from ..vecmath import contracts
from . import sgemm_tile
from .epilogue import CTOR, band_epilogue_fields
from .im2col import TILE_BYTES

__all__ = [
    "SHIFT_MAX_WASTE",
    "SHIFT_MIN_CHANNELS",
    "ShiftGeometry",
    "ShiftKernel",
    "phase_width",
    "shift_rows",
]

SHIFT_MIN_CHANNELS = 32
"""Input channels from which a stride-1 conv runs as shifted products on BLAS (each tap's
GEMM has this inner dimension); 32->32 at 80x80 gained a fifth. On the tile there is no
minimum."""

SHIFT_MAX_WASTE = 0.125
"""The most padded columns (KW - 1) * dw a shifted product may compute per output column.
Measured at 3x3 (1 thread, interleaved with im2col): 56 and 28 wide (3.6% and 7%) gained
0.5 and 0.2 ms; 14 wide (14%) lost 0.4 ms and 7 wide (29%) 1.1 ms of 2.7."""

_IMPORTS = "import numba\nfrom turnout_numba.cblas import gemm_call\n"

_PAD = """
def _shift_pad(x, xp, dims):
    h = dims[0]
    w = dims[1]
    wp = dims[2]
    top = dims[3]
    left = dims[4]
    sh = dims[9]
    sw = dims[10]
    plen = dims[11]
    hq = dims[12]
    U = np.uint64
    for c in prange(x.shape[0]):
        for i in range(h):
            pr = (i + top) // sh  # the row's place in its phase
            if pr >= hq:  # a row no window reads
                continue
            base = (i + top - pr * sh) * sw * plen + pr * wp
            src = U(i * w)
            if sw == 1:
                d = U(base + left)
                for j in range(U(min(w, wp - left))):
                    xp[c, d + j] = x[c, src + j]
            else:
                # column j goes to phase (j + left) % sw, at (j + left) // sw
                j = 0
                if sw == 2:  # by pairs, both phases in one loop: LLVM deinterleaves in vectors
                    de = U(base + (left % 2) * plen + left // 2)
                    do = U(base + ((left + 1) % 2) * plen + (left + 1) // 2)
                    pairs = max(0, min(w // 2, wp - (left + 1) // 2))
                    for t in range(U(pairs)):
                        a = x[c, src + U(2) * t]
                        b = x[c, src + U(2) * t + U(1)]
                        xp[c, de + t] = a
                        xp[c, do + t] = b
                    j = 2 * pairs
                for j in range(j, w):
                    pc = (j + left) // sw
                    if pc < wp:
                        xp[c, base + ((j + left) % sw) * plen + pc] = x[c, src + U(j)]
"""

# the names a band's epilogue reads (`epilogue.activation_lines`), set the same in both sources
_BAND_NAMES = """    T = {ctor}
    zero = T(0)
    one = T(1)
    a0 = T(p0)
    a1 = T(p1)
    wp = dims[2]
    oh = dims[5]
    ow = dims[6]
"""

_BANDS = (
    """
def _shift_bands(xp, wt, y2, scratch, bias, full, dims, rows, address, ilp64, p0, p1):
"""
    + _BAND_NAMES
    + """    kh = wt.shape[0]
    kw = wt.shape[1]
    dh = dims[7]
    dw = dims[8]
    m_ = wt.shape[2]
    c_ = wt.shape[3]
    lx = xp.shape[1]
    count = (oh + rows - 1) // rows
    for q in prange(count):
        r0 = q * rows
        r1 = min(oh, r0 + rows)
        n = (r1 - r0) * wp
        acc = scratch[{thread}, : m_ * n].reshape((m_, n))
        beta = 0.0
        for ki in range(kh):
            for kj in range(kw):
                off = (r0 + ki * dh) * wp + kj * dw
                gemm_call(address, ilp64, m_, n, c_, wt[ki, kj], c_, xp[:, off:], lx, acc, n,
                          beta)
                beta = 1.0
{epilogue}"""
)

_BANDS_TILE = (
    """
def _shift_bands(xp, wt, y2, scratch, bias, full, dims, rows, taps, p0, p1):
    # {tag}
"""
    + _BAND_NAMES
    + """    m_ = wt.shape[0]
    kk = wt.shape[1]
    count = (oh + rows - 1) // rows
    for q in prange(count):
        r0 = q * rows
        r1 = min(oh, r0 + rows)
        n = (r1 - r0 - 1) * wp + ow
        acc = scratch[{thread}, : m_ * n].reshape((m_, n))
        wt.turnout_sgemm_rows(kk, xp, taps, r0 * wp, acc, n, m_, n, kk)
{epilogue}"""
)

_EPILOGUE = """\
        for j in range(m_):
{bias}            for r in range(r1 - r0):
                src = acc[j, r * wp : r * wp + ow]
                dst = y2[j, (r0 + r) * ow : (r0 + r) * ow + ow]
{full}                for k in range(ow):
                    v = src[k]{terms}
{act}                    dst[k] = v
"""


def _source(
    dtype: np.dtype[Any], act: str, bias: bool, full: bool, parallel: bool, tile: bool
) -> str:
    """The band kernel's text for one (dtype, activation, bias?, residual?, parallel?,
    tile?)."""
    row = "full[j, (r0 + r) * ow :]" if full else None
    epilogue = _EPILOGUE.format(**band_epilogue_fields(dtype, act, bias, row, (12, 16, 20)))
    # the tile's tag in the function's own text: a kernel cached with one tile is never
    # loaded for another
    return _IMPORTS + (_BANDS_TILE if tile else _BANDS).format(
        ctor=CTOR[dtype.name],
        thread="numba.get_thread_id()" if parallel else "0",
        epilogue=epilogue,
        tag=sgemm_tile.TAG,
    )


@dataclass(frozen=True)
class ShiftGeometry:
    """One input shape's layout: the padded image (C, SH * SW phases of `_phases`' length)
    and the band height; `dims` packs (H, W, Wp, top, left, OH, OW, dh, dw, SH, SW, phase
    length, Hq) for the kernels; `taps`, per row (c, ki, kj) of the weights' columns, where
    that tap of channel c starts in the padded image (read flat) relative to a band's first
    row: the tile kernel's rows of B."""

    dims: Any
    padded_len: int
    rows: int
    taps: Any


def shift_rows(pixel_bytes: int, wide: int, out_h: int, threads: int) -> int:
    """Output rows per band: as many as keep a band's accumulator and input rows within
    `TILE_BYTES` (`pixel_bytes` a wide output pixel's share), and with threads no more than
    give two bands a thread where the image allows."""
    rows = max(1, TILE_BYTES // max(1, pixel_bytes * wide))
    if threads > 1:
        rows = min(rows, max(1, -(-out_h // (2 * threads))))
    return min(rows, max(1, out_h))


def _phases(
    out: tuple[int, int],
    kernel: tuple[int, int],
    dilations: tuple[int, int],
    strides: tuple[int, int],
) -> tuple[int, int, int]:
    """(Wp, Hq, length) of one phase of the padded image: phase (a, b) holds the padded
    positions (a + i*SH, b + j*SW), in rows Wp = OW + (KW-1)*dw // SW wide (a product
    computes the outputs that wide), Hq = OH + (KH-1)*dh // SH of them, and the length read
    across the last row's end. Tap (u, v) = (ki*dh, kj*dw) of output (r, c) reads phase
    (u % SH, v % SW) at (r + u // SH, c + v // SW): stride 1. With strides 1 it is the padded
    image itself."""
    (oh, ow), (kh, kw), (dh, dw), (sh, sw) = out, kernel, dilations, strides
    wp = phase_width(ow, kw, dw, sw)
    hq = oh + (kh - 1) * dh // sh
    return wp, hq, hq * wp + (kw - 1) * dw // sw


def phase_width(out_w: int, kernel_w: int, dilation_w: int, stride_w: int) -> int:
    """The width a shifted product computes per output row (`_phases`' Wp)."""
    return out_w + (kernel_w - 1) * dilation_w // stride_w


class ShiftKernel:
    """The padding and band kernels of one (dtype, activation, bias?, residual?, parallel?,
    tile?). With `tile` (float32, where `sgemm_tile.AVAILABLE`) a band's taps are one product
    on the register tile, K = C*KH*KW, B's rows gathered from the padded image as the tile
    packs them (`turnout_sgemm_rows`): no accumulation pass per tap, and the weights as given;
    else one BLAS GEMM per tap accumulating into the band (beta 1), on the weights as
    (KH, KW, M, C)."""

    def __init__(
        self,
        dtype: np.dtype[Any],
        activation: tuple[str, float, float],
        bias: bool,
        full: bool,
        parallel: bool,
        tile: bool = False,
    ) -> None:
        if tile and not (sgemm_tile.AVAILABLE and dtype == np.float32):
            raise ValueError(f"no register tile for {dtype} on this host")
        self.dtype = dtype
        self.activation = activation
        self.tile = tile
        ro = numba_array(dtype, 2, readonly=True, layout="C")
        rw = numba_array(dtype, 2, readonly=False, layout="C")
        dims = types.Array(types.int64, 1, "C", readonly=True)
        pad = cache.load_source(_PAD, "shift_pad")._shift_pad
        self._pad = cache.jit(pad, [types.void(ro, rw, dims)], parallel=parallel)
        text = _source(dtype, activation[0], bias, full, parallel, tile)
        fn = cache.load_source(text, "shift_bands")._shift_bands
        # tile: W (M, C*KH*KW) and the taps; BLAS: W (KH, KW, M, C) and the GEMM's address
        product = (
            [ro, rw, rw, numba_array(dtype, 1, readonly=True, layout="C"), ro, dims, types.int64,
             dims]
            if tile
            else [numba_array(dtype, 4, readonly=True, layout="C"), rw, rw,
                  numba_array(dtype, 1, readonly=True, layout="C"), ro, dims, types.int64,
                  types.int64, types.boolean]
        )  # fmt: skip
        sig = types.void(ro, *product, types.float64, types.float64)
        self._bands = cache.jit(
            fn, [sig], parallel=parallel, imports=_IMPORTS, contract=contracts(text)
        )
        self._none1 = np.zeros(1, dtype)
        self._none2 = np.zeros((1, 1), dtype)
        self._weights: tuple[Any, Any] | None = None  # (W as given, W as (KH, KW, M, C))

    def geometry(
        self,
        hw: tuple[int, int],
        pads_begin: tuple[int, int],
        out: tuple[int, int],
        kernel: tuple[int, int],
        dilations: tuple[int, int],
        channels: tuple[int, int],
        threads: int,
        strides: tuple[int, int] = (1, 1),
    ) -> ShiftGeometry:
        """The layout for an (H, W) input giving `out` with these pads, kernel, dilations and
        strides, for `channels` (C, M). A stride above 1 (the tile only) splits the padded
        image into its SH x SW phases (`_phases`), in which every tap reads at stride 1."""
        (h, w), (top, left), (oh, ow) = hw, pads_begin, out
        (sh, sw), (dh, dw) = strides, dilations
        if (sh, sw) != (1, 1) and not self.tile:
            raise ValueError("strided shifted products run on the register tile only")
        wp, hq, plen = _phases(out, kernel, dilations, strides)
        dims = np.array(
            [h, w, wp, top, left, oh, ow, dh, dw, sh, sw, plen, hq], np.int64
        )  # fmt: skip
        rows = shift_rows((channels[0] + channels[1]) * self.dtype.itemsize, wp, oh, threads)
        length = sh * sw * plen
        u, v = (a.ravel() for a in np.indices(kernel, np.int64))
        u, v = u * dh, v * dw
        tap = ((u % sh) * sw + v % sw) * plen + (u // sh) * wp + v // sw
        taps = (np.arange(channels[0], dtype=np.int64)[:, None] * length + tap).ravel()
        return ShiftGeometry(dims, length, rows, taps)

    def packed(self, w: Any) -> Any:
        """W (M, C, KH, KW) as the band kernel reads it: (M, C*KH*KW) for the tile (a view),
        else (KH, KW, M, C), kept while the same array comes back (an
        initializer reaches the kernel as the same object every run)."""
        if self.tile:
            return w.reshape(w.shape[0], -1)
        kept = self._weights
        if kept is not None and kept[0] is w:
            return kept[1]
        wt = np.ascontiguousarray(w.transpose(2, 3, 0, 1))
        self._weights = (w, wt)
        return wt

    def __call__(
        self,
        x: Any,
        wt: Any,
        y: Any,
        bias: Any,
        full: Any,
        geo: ShiftGeometry,
        padded: Any,
        scratch: Any,
        address: int,
        ilp64: bool,
    ) -> None:
        """Convolve the images of `x` (N, C, H*W) into `y` (N, M, OH*OW), `wt` the weights as
        `packed` gives them (`address`, `ilp64`: BLAS's GEMM, unused by the tile). `padded` is a
        zeroed (C, geo.padded_len) buffer (only the image's positions are written, so it can be
        kept between runs); `scratch` has a row of M * rows * Wp elements per numba thread."""
        _, p0, p1 = self.activation
        row = self._none1 if bias is None else bias
        for n in range(x.shape[0]):
            self._pad(x[n], padded, geo.dims)
            zn = self._none2 if full is None else full[n]
            product = (geo.taps,) if self.tile else (address, ilp64)
            self._bands(padded, wt, y[n], scratch, row, zn, geo.dims, geo.rows, *product, p0, p1)
