"""Where each tap of a 2-D sliding window reads, planned once per input shape (no numba here).

The window kernels (depthwise Conv, im2col) read a channel's plane as one
flat array, so that their inner loops run over outputs with every tap at a fixed offset: a loop
over a whole plane vectorizes, a loop over one short row runs mostly scalar. Two layouts:

- `flat` (stride 1, output rows as long as input rows, undilated columns: the 'same' conv):
  the whole output plane is one loop. Output `p` reads tap `t` at `src[offs[t] + p]` of a copy
  of the plane with `g0` padding values before it (rows above and below the input read those).
  A tap of kernel column `kj` counts for output column `cols[p]` only within `[lo[kj],
  hi[kj])`; outside, its read lands in a neighbour row and is dropped by a select, never
  multiplied by zero, so an inf there cannot leak into the output.
- otherwise the plane is copied once into a padded buffer split by stride phase (padded pixel
  (u, v) in phase plane (u % sh, v % sw), at row u // sh and column v // sw; planes of `plane`
  values, rows `wp` long), so that every tap reads consecutive values: output `j` of row `r`
  reads tap `t` at `src[offs[t] + r * rstep + j]` (`rstep == wp`), which is also position
  `r * wp + j` of one loop over all the rows (the `wp - OW` values past each row's end are
  computed and dropped). Without padding, at column stride 1, the input itself is read
  (`direct`, `rstep = sh * W`, one loop per output row).

The buffer starts filled with the padding value (0) and the copy writes
only the input's positions, so one buffer serves every plane a kernel walks. A kernel that skips
the window rows over padding (`row_passes`, the depthwise kernel) gets the padded layout for a
short plane (`SHORT_PLANE_SHARE`) as well: its row gutters hold zeros, so it needs no select.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..codegen import numba_array

__all__ = [
    "GEO",
    "SHORT_PLANE_SHARE",
    "Window",
    "copy_lines",
    "geo_lines",
    "plan_window",
    "window_arg_types",
]

SHORT_PLANE_SHARE = (1, 3)
"""(a, b): a stride-1 plane is short when at least a/b of its (kernel row, output row) reads
fall on padding rows (a 5x5 window over 2 or 3 rows, a 3x3 over 2). For a kernel that adds
each kernel row only where it reads inside the image (`row_passes`), such a plane takes the
padded layout, whose gutters need no select, instead of `flat`."""


@dataclass(frozen=True)
class Window:
    """The read plan of one geometry; `args()` is what the kernels take."""

    flat: bool
    rows: int
    rlen: int
    offs: np.ndarray[Any, np.dtype[np.int64]]
    cols: np.ndarray[Any, np.dtype[np.int32]]
    lo: np.ndarray[Any, np.dtype[np.int32]]
    hi: np.ndarray[Any, np.dtype[np.int32]]
    geo: np.ndarray[Any, np.dtype[np.int64]]
    """The integers of the plan, in the order of `GEO`."""

    def args(self) -> tuple[Any, ...]:
        """(offs, cols, lo, hi, geo): the kernels' geometry arguments, in their order."""
        return (self.offs, self.cols, self.lo, self.hi, self.geo)


def window_arg_types() -> tuple[Any, ...]:
    """The numba types of `Window.args()`, in order, for the signatures of the kernels that take
    them: (offs int64, cols int32, lo int32, hi int32, geo int64), read-only C arrays."""
    i32 = numba_array(np.dtype(np.int32), 1, readonly=True, layout="C")
    i64 = numba_array(np.dtype(np.int64), 1, readonly=True, layout="C")
    return (i64, i32, i32, i32, i64)


GEO = (
    "flat", "direct", "rows", "rlen", "rstep", "blen", "g0", "pt", "pl", "sw", "wp", "plane",
    "in_h", "in_w", "dw", "sh", "short",
)  # fmt: skip
"""The order of the integers in `Window.geo` (the kernels unpack them in this order). `short`:
a stride-1 padded layout chosen for a short plane (`row_passes`)."""


def plan_window(
    hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads_begin: tuple[int, int],
    out: tuple[int, int],
    row_passes: bool = False,
) -> Window:
    """The read plan of a (KH, KW) window over an (H, W) plane giving an `out` grid.
    `row_passes`: the kernel adds each kernel row only over the rows it reads inside the
    image, so a short plane (`SHORT_PLANE_SHARE`) takes the padded layout."""
    h, w = hw
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    pt, pl = pads_begin
    oh, ow = out
    taps = [(ki, kj) for ki in range(kh) for kj in range(kw)]
    short = row_passes and sh == 1 and sw == 1 and _short_plane(h, oh, kh, dh, pt)
    if sh == 1 and sw == 1 and dw == 1 and ow == w and not short:
        raw = np.array([(ki * dh - pt) * w + kj - pl for ki, kj in taps], np.int64)
        rlen = oh * ow
        first = int(raw.min())
        last = int(raw.max()) + rlen - 1
        direct = first >= 0 and last <= h * w - 1
        g0 = 0 if direct else max(0, -first)
        blen = 0 if direct else g0 + max(h * w, last + 1)
        # output column c reads input column c + kj - pl: inside for lo <= c < hi
        lo = np.array([pl - kj for kj in range(kw)], np.int64)
        hi = np.array([w + pl - kj for kj in range(kw)], np.int64)
        cols = (np.arange(rlen, dtype=np.int64) % w).astype(np.int32)
        geo = [1, direct, 1, rlen, 0, blen, g0, pt, pl, 1, w, 0, h, w, 1, 1, 0]
        return Window(True, 1, rlen, raw + g0, cols, _i32(lo), _i32(hi), np.array(geo, np.int64))
    # padded plane split by stride phase: padded pixel (u, v) lives in phase plane
    # (u % sh, v % sw) at row u // sh, column v // sw, so that output row r reads rows r + c of
    # each phase plane (rstep = wp) and a whole output plane is affine in the phase planes
    span_h = (oh - 1) * sh + (kh - 1) * dh + 1  # padded rows the windows read
    span_w = (ow - 1) * sw + (kw - 1) * dw + 1
    direct = sw == 1 and pt == 0 and pl == 0 and span_h <= h and span_w <= w
    if direct:  # the input itself: output (r, j) reads row r * sh + c, column j * sw + c'
        hq, wp = h, w
        plane = h * w
        offs = np.array([ki * dh * w + kj * dw for ki, kj in taps], np.int64)
    else:
        hq = -(-max(span_h, h + pt) // sh)
        wp = max(-(-span_w // sw), (w - 1 + pl) // sw + 1)
        plane = hq * wp
        offs = np.array(
            [
                (((ki * dh) % sh) * sw + (kj * dw) % sw) * plane
                + ((ki * dh) // sh) * wp
                + (kj * dw) // sw
                for ki, kj in taps
            ],
            np.int64,
        )
    blen = 0 if direct else sh * sw * plane
    rstep = sh * w if direct else wp
    geo = [0, direct, oh, ow, rstep, blen, 0, pt, pl, sw, wp, plane, h, w, dw, sh, int(short)]
    none = np.zeros(1, np.int32)
    return Window(False, oh, ow, offs, none, none, none, np.array(geo, np.int64))


def _short_plane(h: int, oh: int, kh: int, dh: int, pt: int) -> bool:
    """Whether a stride-1 window's (kernel row, output row) reads fall on padding rows at
    least `SHORT_PLANE_SHARE` of the time."""
    inside = sum(max(0, min(oh, pt + h - ki * dh) - max(0, pt - ki * dh)) for ki in range(kh))
    a, b = SHORT_PLANE_SHARE
    return oh > 0 and (kh * oh - inside) * b >= a * kh * oh


def _i32(a: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.int32]]:
    limit = np.iinfo(np.int32)
    out: np.ndarray[Any, np.dtype[np.int32]] = np.clip(a, limit.min, limit.max).astype(np.int32)
    return out


def geo_lines(indent: int) -> str:
    """Generated-kernel statements naming the integers of `geo` (as in `GEO`)."""
    pad = " " * indent
    return "".join(f"{pad}{name} = geo[{i}]\n" for i, name in enumerate(GEO))


_COPY = """\
if flat:
    dst = buf[g0 : g0 + in_h * in_w]
    for k in range(in_h * in_w):
        dst[k] = src[k]
else:
    u1 = np.uint64(1)
    u2 = np.uint64(2)
    u_w = np.uint64(in_w)
    half = np.uint64(in_w // 2)
    even = (pl % 2) * plane + pl // 2
    odd = ((pl + 1) % 2) * plane + (pl + 1) // 2
    phase = pt % sh
    prow = pt // sh
    for i in range(in_h):
        row = phase * sw * plane + prow * wp
        phase += 1
        if phase == sh:
            phase = 0
            prow += 1
        row_src = np.uint64(i * in_w)
        if sw == 1:
            row_dst = np.uint64(row + pl)
            for uk in range(u_w):
                buf[row_dst + uk] = src[row_src + uk]
        elif sw == 2:
            row_even = np.uint64(row + even)
            row_odd = np.uint64(row + odd)
            for uk in range(half):
                buf[row_even + uk] = src[row_src + u2 * uk]
                buf[row_odd + uk] = src[row_src + u2 * uk + u1]
            if in_w % 2:
                buf[row_even + half] = src[row_src + u_w - u1]
        else:
            for k in range(in_w):
                u = k + pl
                buf[row + (u % sw) * plane + u // sw] = src[i * in_w + k]
"""


def copy_lines(indent: int) -> str:
    """Generated-kernel statements copying the plane `src` (flat, H*W) into `buf` as the plan
    lays it out (only the input's positions are written: the padding keeps the value `buf` was
    filled with, for the next plane too). For stride 2, even and odd columns are read in one
    loop, which LLVM vectorizes with shuffles. The rows are addressed by unsigned positions,
    not views: numba wraps no negative index for them, so the loops still vectorize, and a view
    per row took and dropped a reference count each (atomics), which cost more than copying a
    short row (144 planes of 14 x 14 at stride 2: 55 of a depthwise conv's 63 us)."""
    pad = " " * indent
    return "".join(f"{pad}{line}\n" for line in _COPY.splitlines())
