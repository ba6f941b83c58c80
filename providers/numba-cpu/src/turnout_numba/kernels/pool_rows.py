"""MaxPool and AveragePool (1-D and 2-D) by rows, with no padded copy of the input.

Both pools are separable: a window's max (sum) is the max (sum) over its columns of the max
(sum) over its rows. So per output row the kernel first reduces the window's input rows that
lie inside the input (the window clamped at the top and bottom, planned per output row in
`geometry`) elementwise into one row buffer `t` (contiguous loops, which vectorize), then
reduces each output's `kw` taps of that buffer at the column stride (strides 1 and 2 with
kernels 2 and 3 wide are written out with literal offsets, which LLVM vectorizes with shuffles;
other geometries loop over the taps). The buffer holds `pl` identity values before the row and
identity values after it as far as the last window reads, so the left and right padding (and
ceil_mode's overhang) cost nothing per plane. The identity is the pool's: -inf or the integer
type's minimum for the max, 0 for the (float64) sum. AveragePool multiplies each sum by its
window's reciprocal count `rc`, planned by the caller. Stride-1 'same' pools (inception's 3x3
pad-1 branches) run `max_flat` / `avg_flat` instead, and MaxPool on narrow planes (output rows
under 32 wide) `max_plane`: each pass one loop over the whole plane, since at 13- or 6-wide
rows the row loops run mostly scalar (LLVM's vector loop takes 32 floats per turn).

The kernels index the planes with integers, never per-row slices (a slice costs two
reference-count calls, as long as a short row's arithmetic), and the rows kernels index the
(P, H, W) planes by row and column, so no index can look negative to LLVM: numba's negative-
index wraparound on a computed flat offset turned the row loops into scatters. The per-row
geometry (first row inside the input, rows inside) is planned, not divided out per row.

MaxPool's max is Python's max, one vector instruction that keeps or drops a NaN by its operand
order, so the max kernels also say whether each plane's windows read a NaN and return how many
planes do; the caller redoes a run that has any by turnout's NaN rule (pool.py's `_max_pool_nan`).
The row pass flags a NaN as it reads: the sum of the rows it reduces is NaN when one of them is
(one compare per sum, not per row; a column holding both infinities flags too, and its redo
gives the same answer). A loop of its own over each plane after the passes cost as much as
both passes on 111x111 planes, 70 of 177 us against 19 of 128 us fused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from ..codegen import numba_array

__all__ = [
    "avg_flat",
    "avg_rows",
    "flat_geometry",
    "flat_sig",
    "geometry",
    "max_flat",
    "max_plane",
    "max_rows",
    "plane_fits",
    "plane_geometry",
    "rows_sig",
]


def geometry(
    hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads_begin: tuple[int, int],
    out: tuple[int, int],
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The kernels' `geo` argument: (kw, sw, dw, pl, w, oh, ow, tlen, dh * w), then per output
    row the offset of its window's first row inside the input (row times w), then per output
    row how many of its window's rows lie inside the input. `tlen` is the row buffer's length:
    the left padding plus the input row, or as far as the last window reads if further."""
    (h, w), (kh, kw), (sh, sw), (dh, dw), (pt, pl), (oh, ow) = (
        hw, kernel, strides, dilations, pads_begin, out
    )  # fmt: skip
    tlen = max(pl + w, (ow - 1) * sw + (kw - 1) * dw + 1)
    rows = np.arange(oh)[:, None] * sh - pt + np.arange(kh)[None, :] * dh
    inside = (rows >= 0) & (rows < h)
    count = inside.sum(axis=1)
    first = np.where(inside.any(axis=1), rows[np.arange(oh), inside.argmax(axis=1)], 0)
    head = [kw, sw, dw, pl, oh, tlen, dh]
    return np.concatenate([np.array(head, np.int64), first, count]).astype(np.int64)


def _pool_sig(c: np.dtype[Any], is_max: bool, rank: int) -> Any:
    """(x, y, geo, chunks, low) -> int64 planes holding a NaN for the max kernels, (x, y, geo,
    chunks, rc) -> void for the average ones; planes of dtype `c` as rank-`rank` arrays and the
    average's reciprocal counts one rank lower."""
    x = numba_array(c, rank, readonly=True, layout="C")
    y = numba_array(c, rank, readonly=False, layout="C")
    geo = numba_array(np.dtype(np.int64), 1, readonly=True, layout="C")
    if is_max:
        low = numba_array(c, 1, readonly=True, layout="C")
        return types.int64(x, y, geo, types.int64, low)
    rc = numba_array(np.dtype(np.float64), rank - 1, readonly=True, layout="C")
    return types.void(x, y, geo, types.int64, rc)


def rows_sig(c: np.dtype[Any], is_max: bool) -> Any:
    """The signature of `max_rows` (int64: the planes holding a NaN) or `avg_rows` (void) for
    planes of dtype `c`."""
    return _pool_sig(c, is_max, 3)


def max_rows(x: Any, y: Any, geo: Any, chunks: int, lowa: Any) -> int:  # pragma: no cover
    """y[p] (OH*OW) = the max pool of plane x[p] (H*W), planes split in `chunks` (prange);
    `lowa[0]` is the identity. Returns how many planes hold a NaN."""
    kw, sw, dw, pl, oh_n, tlen, dh = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6]
    w = x.shape[2]
    ow_n = y.shape[2]
    low = lowa[0]
    planes = x.shape[0]
    nans = 0
    for ch in prange(chunks):
        t = np.empty(tlen, x.dtype)
        for k in range(tlen):
            t[k] = low
        tv = t[pl:]  # the input row's place in t
        for q in range(ch * planes // chunks, (ch + 1) * planes // chunks):
            seen = False  # a flag, not a count: an OR vectorizes best
            for o in range(oh_n):
                b0 = geo[7 + o]
                nr = geo[7 + oh_n + o]
                if nr == 3:
                    b1 = b0 + dh
                    b2 = b1 + dh
                    for k in range(w):
                        a, b, c = x[q, b0, k], x[q, b1, k], x[q, b2, k]
                        tv[k] = max(a, b, c)
                        u = a + b + c
                        seen |= u != u
                elif nr == 2:
                    b1 = b0 + dh
                    for k in range(w):
                        a, b = x[q, b0, k], x[q, b1, k]
                        tv[k] = max(a, b)
                        u = a + b
                        seen |= u != u
                elif nr == 0:  # no row of the window inside the input
                    for k in range(w):
                        tv[k] = low
                else:
                    for k in range(w):
                        a = x[q, b0, k]
                        tv[k] = a
                        seen |= a != a
                    for i in range(1, nr):
                        bi = b0 + i * dh
                        for k in range(w):
                            a = x[q, bi, k]
                            tv[k] = max(tv[k], a)
                            seen |= a != a
                if dw == 1 and sw == 2 and kw == 3:
                    for j in range(ow_n):
                        y[q, o, j] = max(t[2 * j], t[2 * j + 1], t[2 * j + 2])
                elif dw == 1 and sw == 2 and kw == 2:
                    for j in range(ow_n):
                        y[q, o, j] = max(t[2 * j], t[2 * j + 1])
                elif dw == 1 and sw == 1 and kw == 3:
                    for j in range(ow_n):
                        y[q, o, j] = max(t[j], t[j + 1], t[j + 2])
                elif dw == 1 and sw == 1 and kw == 2:
                    for j in range(ow_n):
                        y[q, o, j] = max(t[j], t[j + 1])
                else:
                    for j in range(ow_n):
                        y[q, o, j] = t[j * sw]
                    for kj in range(1, kw):
                        tb = kj * dw
                        for j in range(ow_n):
                            y[q, o, j] = max(y[q, o, j], t[tb + j * sw])
            nans += seen
    return nans


def avg_rows(x: Any, y: Any, geo: Any, chunks: int, rc: Any) -> None:  # pragma: no cover
    """y[p] (OH*OW) = the average pool of plane x[p] (H*W), planes split in `chunks`: the
    window sums in float64 times `rc`, the reciprocal window counts (OH*OW)."""
    kw, sw, dw, pl, oh_n, tlen, dh = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6]
    w = x.shape[2]
    ow_n = y.shape[2]
    F = np.float64
    planes = x.shape[0]
    for ch in prange(chunks):
        t = np.zeros(tlen, np.float64)
        tv = t[pl:]
        for q in range(ch * planes // chunks, (ch + 1) * planes // chunks):
            for o in range(oh_n):
                b0 = geo[7 + o]
                nr = geo[7 + oh_n + o]
                if nr == 3:
                    b1 = b0 + dh
                    b2 = b1 + dh
                    for k in range(w):
                        tv[k] = F(x[q, b0, k]) + F(x[q, b1, k]) + F(x[q, b2, k])
                elif nr == 2:
                    b1 = b0 + dh
                    for k in range(w):
                        tv[k] = F(x[q, b0, k]) + F(x[q, b1, k])
                elif nr == 0:
                    for k in range(w):
                        tv[k] = 0.0
                else:
                    for k in range(w):
                        tv[k] = F(x[q, b0, k])
                    for i in range(1, nr):
                        bi = b0 + i * dh
                        for k in range(w):
                            tv[k] += F(x[q, bi, k])
                if dw == 1 and sw == 2 and kw == 3:
                    for j in range(ow_n):
                        y[q, o, j] = (t[2 * j] + t[2 * j + 1] + t[2 * j + 2]) * rc[o, j]
                elif dw == 1 and sw == 2 and kw == 2:
                    for j in range(ow_n):
                        y[q, o, j] = (t[2 * j] + t[2 * j + 1]) * rc[o, j]
                elif dw == 1 and sw == 1 and kw == 3:
                    for j in range(ow_n):
                        y[q, o, j] = (t[j] + t[j + 1] + t[j + 2]) * rc[o, j]
                else:
                    for j in range(ow_n):
                        s = t[j * sw]
                        for kj in range(1, kw):
                            s += t[j * sw + kj * dw]
                        y[q, o, j] = s * rc[o, j]


def flat_sig(c: np.dtype[Any], is_max: bool) -> Any:
    """The signature of `max_flat` / `avg_flat`: `rows_sig`'s, with planes flattened (P, H*W)
    and (P, OH*OW), and the average's `rc` flat (OH*OW)."""
    return _pool_sig(c, is_max, 2)


def flat_geometry(geo: Any, h: int, kh: int, pt: int) -> Any:
    """`geometry()` plus what the flat kernels need (strides 1, columns undilated, output rows
    as long as input rows): (pt, kh, oa, ob) appended, where [oa, ob) are the output rows
    whose windows lie wholly inside the input."""
    oh = int(geo[4])
    dh = int(geo[6])
    oa = min(pt, oh)
    ob = max(oa, min(oh, h - (kh - 1) * dh + pt))
    return np.concatenate([geo, np.array([pt, kh, oa, ob], np.int64)])


def max_flat(x: Any, y: Any, geo: Any, chunks: int, lowa: Any) -> int:  # pragma: no cover
    """`max_rows` for strides 1, columns undilated and output rows as long as the input's
    ('same' pooling), each pass one loop over the plane: the rows whose windows lie inside the
    input are reduced in one loop into the plane buffer `v` (the others row by row), then every
    output takes the max of its `kw` neighbours in `v` (reading across row ends), and the first
    `pl` and last `kw - 1 - pl` columns of each row are redone with their windows clamped
    (written out for the common kw = 3, pl = 1: a loop per edge column cost more than the
    rest at 6x6 planes). The whole-plane loops index with unsigned integers and no slices, as
    the rows kernels do (a slice per plane costs two reference-count calls)."""
    U = np.uint64
    kw, pl, oh_n, dh = U(geo[0]), U(geo[3]), geo[4], U(geo[6])
    e = geo.shape[0] - 4
    pt, kh, oa, ob = U(geo[e]), U(geo[e + 1]), U(geo[e + 2]), U(geo[e + 3])
    w = U(y.shape[1] // oh_n)
    n = U(oh_n) * w
    low = lowa[0]
    planes = x.shape[0]
    # the edge columns in signed integers: [0, el) and [er, wi)
    wi, pli, kwi = y.shape[1] // oh_n, geo[3], geo[0]
    el = min(pli, wi)
    er = max(el, wi - (kwi - 1 - pli))
    oai, obi, dhw = geo[geo.shape[0] - 2], geo[geo.shape[0] - 1], geo[6] * wi
    m = (ob - oa) * w  # the outputs whose window rows are all inside: [oa * w, ob * w)
    a0 = (oa - pt) * w  # their first rows in the input
    d = dh * w
    nans = 0
    for ch in prange(chunks):
        vb = np.empty(n + kw, x.dtype)
        for k in range(n + kw):
            vb[k] = low
        vo = pl + oa * w  # where `m` starts in vb
        for q in range(ch * planes // chunks, (ch + 1) * planes // chunks):
            seen = False  # a NaN in a row a window reads, as in `max_rows`
            if kh == U(3):
                for k in range(m):
                    a, b, c = x[q, a0 + k], x[q, a0 + d + k], x[q, a0 + U(2) * d + k]
                    vb[vo + k] = max(a, b, c)
                    z = a + b + c
                    seen |= z != z
            elif kh == U(2):
                for k in range(m):
                    a, b = x[q, a0 + k], x[q, a0 + d + k]
                    vb[vo + k] = max(a, b)
                    z = a + b
                    seen |= z != z
            else:
                for k in range(m):
                    a = x[q, a0 + k]
                    vb[vo + k] = a
                    seen |= a != a
                for i in range(U(1), kh):
                    for k in range(m):
                        a = x[q, a0 + i * d + k]
                        vb[vo + k] = max(vb[vo + k], a)
                        seen |= a != a
            for o in range(oh_n):  # the other rows, clamped
                if oai <= o < obi:
                    continue
                nr = geo[7 + oh_n + o]
                ro = pli + o * wi
                b0 = geo[7 + o] * wi
                if nr == 0:
                    for k in range(wi):
                        vb[ro + k] = low
                else:
                    for k in range(wi):
                        a = x[q, b0 + k]
                        vb[ro + k] = a
                        seen |= a != a
                    for i in range(1, nr):
                        for k in range(wi):
                            a = x[q, b0 + i * dhw + k]
                            vb[ro + k] = max(vb[ro + k], a)
                            seen |= a != a
            if kw == U(3):
                for k in range(n):
                    y[q, k] = max(vb[k], vb[k + U(1)], vb[k + U(2)])
            elif kw == U(2):
                for k in range(n):
                    y[q, k] = max(vb[k], vb[k + U(1)])
            else:
                for k in range(n):
                    y[q, k] = vb[k]
                for kj in range(U(1), kw):
                    for k in range(n):
                        y[q, k] = max(y[q, k], vb[k + kj])
            if kwi == 3 and pli == 1 and wi >= 2:  # the common case, written out
                for o in range(oh_n):
                    ro = o * wi
                    y[q, ro] = max(vb[ro + 1], vb[ro + 2])
                    y[q, ro + wi - 1] = max(vb[ro + wi - 1], vb[ro + wi])
            else:
                for o in range(oh_n):  # the edge columns, their windows clamped
                    ro = o * wi
                    for u in range(el + wi - er):
                        j = u if u < el else er + u - el
                        s = low
                        for c in range(max(0, j - pli), min(wi, j - pli + kwi)):
                            s = max(s, vb[pli + ro + c])
                        y[q, ro + j] = s
            nans += seen
    return nans


def avg_flat(x: Any, y: Any, geo: Any, chunks: int, rc: Any) -> None:  # pragma: no cover
    """`avg_rows` as `max_flat` computes `max_rows` (float64 sums, `rc` flat)."""
    kw, pl, oh_n, dh = geo[0], geo[3], geo[4], geo[6]
    e = geo.shape[0] - 4
    pt, kh, oa, ob = geo[e], geo[e + 1], geo[e + 2], geo[e + 3]
    w = y.shape[1] // oh_n
    n = oh_n * w
    low = 0.0
    F = np.float64
    planes = x.shape[0]
    lend = min(pl, w)  # left edge columns: [0, lend); right ones: [rbeg, w)
    rbeg = max(lend, w - (kw - 1 - pl))
    for ch in prange(chunks):
        vb = np.empty(n + kw, np.float64)
        for k in range(n + kw):
            vb[k] = low
        v = vb[pl:]
        for q in range(ch * planes // chunks, (ch + 1) * planes // chunks):
            xq = x[q]
            yq = y[q]
            if ob > oa:  # the rows whose windows are whole: one loop
                a0 = xq[(oa - pt) * w :]
                vm = v[oa * w :]
                m = (ob - oa) * w
                if kh == 3:
                    a1 = a0[dh * w :]
                    a2 = a0[2 * dh * w :]
                    for k in range(m):
                        vm[k] = F(a0[k]) + F(a1[k]) + F(a2[k])
                elif kh == 2:
                    a1 = a0[dh * w :]
                    for k in range(m):
                        vm[k] = F(a0[k]) + F(a1[k])
                else:
                    for k in range(m):
                        vm[k] = F(a0[k])
                    for i in range(1, kh):
                        ai = a0[i * dh * w :]
                        for k in range(m):
                            vm[k] += F(ai[k])
            for o in range(oh_n):  # the others, clamped
                if oa <= o < ob:
                    continue
                vo = v[o * w : o * w + w]
                nr = geo[7 + oh_n + o]
                for k in range(w):
                    vo[k] = low
                for i in range(nr):
                    r = xq[(geo[7 + o] + i * dh) * w :]
                    for k in range(w):
                        vo[k] += F(r[k])
            if kw == 3:
                v1 = vb[1:]
                v2 = vb[2:]
                for m in range(n):
                    yq[m] = (vb[m] + v1[m] + v2[m]) * rc[m]
            elif kw == 2:
                v1 = vb[1:]
                for m in range(n):
                    yq[m] = (vb[m] + v1[m]) * rc[m]
            else:
                for m in range(n):
                    a = vb[m]
                    for kj in range(1, kw):
                        a += vb[m + kj]
                    yq[m] = a * rc[m]
            for o in range(oh_n):  # the edge columns, their windows clamped
                for u in range(lend + w - rbeg):
                    j = u if u < lend else rbeg + u - lend
                    s = low
                    for kj in range(kw):
                        c = j - pl + kj
                        if 0 <= c < w:
                            s += v[o * w + c]
                    yq[o * w + j] = s * rc[o * w + j]


def plane_fits(w: int, strides: tuple[int, int], ow: int) -> bool:
    """Whether `max_plane` serves this geometry (output row `o` starts at column-pass position
    `o * sh * w / sw`, so that must be whole) and beats `max_rows`: output rows under 32 wide
    (the rows kernel's column loop then runs scalar: LLVM's vector loop takes 32 floats per
    turn). Stride-1 'same' pooling goes to the flat kernels instead."""
    sh, sw = strides
    return (sh * w) % sw == 0 and ow < 32


def plane_geometry(geo: Any, h: int, w: int, kh: int, sh: int, pt: int, ow: int) -> Any:
    """`geometry()` plus what the plane kernels need, appended: (pt, kh, oa, ob, sh, w, ow,
    hlen), where [oa, ob) are the output rows whose windows lie wholly inside the input and
    `hlen` is the length of the flat column pass."""
    sw, oh, dh = int(geo[1]), int(geo[4]), int(geo[6])
    oa = min(oh, -(-pt // sh))
    ob = max(oa, min(oh, (h - 1 - (kh - 1) * dh + pt) // sh + 1))
    hlen = ((oh - 1) * sh * w) // sw + ow
    tail = [pt, kh, oa, ob, sh, w, ow, hlen]
    return np.concatenate([geo, np.array(tail, np.int64)])


def max_plane(x: Any, y: Any, geo: Any, chunks: int, lowa: Any) -> int:  # pragma: no cover
    """`max_rows` with each pass one loop over the plane (`flat_sig`), for narrow planes (see
    `plane_fits`): `max_flat` generalized to strides, with a copy out.
    The row pass computes, for every output row `o`, the max over its window's rows at
    position `pl + o * sh * w` of the buffer `vb` (the rows whose windows lie inside the input
    in one loop, which also computes the rows between them at stride 2: twice the work, but in
    vectors; the others row by row, clamped); the column pass takes every `sw`-th position of
    `vb` and its `kw` neighbours (one loop, reading across row ends) into `hb`; then each
    output row is copied out of `hb` and its
    edge columns (windows past the input's sides) are redone, clamped. The whole-plane loops
    index with unsigned integers and no slices, as the rows kernels do."""
    U = np.uint64
    kw, sw, dw, pl, oh, dh = geo[0], geo[1], geo[2], geo[3], geo[4], geo[6]
    e = geo.shape[0] - 8
    pt, kh, oa, ob, sh, w, ow, hlen = (
        geo[e], geo[e + 1], geo[e + 2], geo[e + 3], geo[e + 4], geo[e + 5], geo[e + 6],
        geo[e + 7],
    )  # fmt: skip
    rs = sh * w  # from one output row's first window row to the next's
    vlen = pl + sw * hlen + (kw - 1) * dw + 1
    mv = U((ob - 1 - oa) * rs + w) if ob > oa else U(0)  # the one-loop rows: [oa, ob)
    vo = U(pl + oa * rs)
    a0 = U(max(oa * sh - pt, 0) * w)
    d = U(dh * w)
    el = min(ow, (pl + sw - 1) // sw)  # edge columns: [0, el) and [er, ow)
    er = max(el, min(ow, (w - 1 - (kw - 1) * dw + pl) // sw + 1))
    low = lowa[0]
    planes = x.shape[0]
    nans = 0
    for ch in prange(chunks):
        vb = np.empty(vlen, x.dtype)
        for k in range(vlen):
            vb[k] = low
        hb = np.empty(hlen, x.dtype)
        for q in range(ch * planes // chunks, (ch + 1) * planes // chunks):
            seen = False  # a NaN in a row a window reads, as in `max_rows`
            if kh == 3:
                for k in range(mv):
                    a, b, c = x[q, a0 + k], x[q, a0 + d + k], x[q, a0 + U(2) * d + k]
                    vb[vo + k] = max(a, b, c)
                    z = a + b + c
                    seen |= z != z
            elif kh == 2:
                for k in range(mv):
                    a, b = x[q, a0 + k], x[q, a0 + d + k]
                    vb[vo + k] = max(a, b)
                    z = a + b
                    seen |= z != z
            else:
                for k in range(mv):
                    a = x[q, a0 + k]
                    vb[vo + k] = a
                    seen |= a != a
                for i in range(U(1), U(kh)):
                    for k in range(mv):
                        a = x[q, a0 + i * d + k]
                        vb[vo + k] = max(vb[vo + k], a)
                        seen |= a != a
            for o in range(oh):  # the rows clamped at the top or bottom
                if oa <= o < ob:
                    continue
                ro = pl + o * rs
                b0 = geo[7 + o] * w
                for k in range(w):
                    vb[ro + k] = low
                for i in range(geo[7 + oh + o]):
                    for k in range(w):
                        a = x[q, b0 + i * dh * w + k]
                        vb[ro + k] = max(vb[ro + k], a)
                        seen |= a != a
            if dw == 1 and sw == 2 and kw == 3:
                for p in range(U(hlen)):
                    hb[p] = max(vb[U(2) * p], vb[U(2) * p + U(1)], vb[U(2) * p + U(2)])
            elif dw == 1 and sw == 2 and kw == 2:
                for p in range(U(hlen)):
                    hb[p] = max(vb[U(2) * p], vb[U(2) * p + U(1)])
            elif dw == 1 and sw == 1 and kw == 3:
                for p in range(U(hlen)):
                    hb[p] = max(vb[p], vb[p + U(1)], vb[p + U(2)])
            elif dw == 1 and sw == 1 and kw == 2:
                for p in range(U(hlen)):
                    hb[p] = max(vb[p], vb[p + U(1)])
            else:
                for p in range(U(hlen)):
                    hb[p] = vb[p * U(sw)]
                for kj in range(U(1), U(kw)):
                    for p in range(U(hlen)):
                        hb[p] = max(hb[p], vb[p * U(sw) + kj * U(dw)])
            for o in range(oh):
                yo = o * ow
                hbase = (o * rs) // sw
                for j in range(ow):
                    y[q, yo + j] = hb[hbase + j]
                for u in range(el + ow - er):  # the edge columns, clamped
                    j = u if u < el else er + u - el
                    s = low
                    for kj in range(kw):
                        c = j * sw - pl + kj * dw
                        if 0 <= c < w:
                            s = max(s, vb[pl + o * rs + c])
                    y[q, yo + j] = s
            nans += seen
    return nans
