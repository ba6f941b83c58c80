"""Winograd F(2x2, 3x3) for float32 3x3 stride-1 convs, its products on the register tile.

A 3x3 conv computes each 2x2 block of outputs from a 4x4 patch of its input. Transformed
(`B^T d B` for the patch, `G g G^T` for the weights, once per weight array), the block is 16
products of one number each instead of 36: per band of blocks, 16 matrix products (M output
channels by C input channels by the band's blocks) on `sgemm_tile`, then `A^T m A` takes each
block's 16 sums back to its 2x2 outputs. That is 2.25x fewer multiply-adds than the im2col
product, for three passes over memory: the input transform (each patch read once, 16 values
written), the products, and the output transform. On the 2-core Zen 5 EPYC (1 thread, one-node
sessions, best of 4 processes) ResNet's 64 -> 64 conv at 56x56 took 0.76 ms against 1.02 on
the im2col tile and onnxruntime's 0.89-0.96; at 32 input channels it lost 4-10% (hence
`WINO_MIN_CHANNELS`), and at 14x14 (49 blocks: a 48-column tile and one column) it was even.

The transforms index with unsigned integers (numba's wraparound of a negative index on a
computed offset made the loops scalar: the output transform took 294 us instead of 77 at
64x56x56), and the input transform splits each padded row into its even and odd columns first,
so that the 4x4 patches at stride 2 read both at unit stride.

The weights' transform is kept for the weight array it was made from while that array is
read-only (an initializer); a fed or writable weight is transformed again on every run. The
rounding differs from the direct sum's: about 4e-7 of the output's largest value at 64 input
channels (float64 transforms of the weights, float32 ones of the input).

Bands: at most `BAND_BYTES` of transformed input and products a band, and as many bands an
image as give every thread the same number; the threads take bands in turn (`parts`), each
with its own part of a scratch buffer that all Winograd convs of the process share (`_take`).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numba import types

from .. import cache
from ..codegen import numba_array
from ..registry import BuildContext
from . import sgemm_tile

__all__ = [
    "BAND_BYTES",
    "WINO_MIN_CHANNELS",
    "WINO_MIN_OUTPUTS",
    "WINO_MIN_PIXELS",
    "Winograd",
    "winograd_applies",
]

WINO_MIN_CHANNELS = 64
"""The fewest input channels (each product's inner dimension) a conv takes Winograd with: the
transforms cost the same per channel whatever the product saves, and at 32 channels it lost
4-10% (32 -> 32 at 80x80, 32 -> 128 at 27x27; 16 -> 64 at 55x55 took 1.5x as long)."""

WINO_MIN_OUTPUTS = 16
"""The fewest output channels (each product's rows) a conv takes Winograd with."""

WINO_MIN_PIXELS = 400
"""The fewest output pixels a conv (one image) takes Winograd with: each band's products are
as wide as its blocks (a quarter of its pixels), and narrow products waste the tile's lanes."""

BAND_BYTES = 1 << 22
"""A band's transformed input and products at most (16 x (C + M) x blocks floats). Wide
products pay more than L2-sized bands save: 64 -> 64 at 56x56 (1 thread) took 918 us with
512 KB, 889 with 1 MB, 764 with 2 MB and 739 with 4 MB."""

_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
_T = np.kron(_G, _G)
"""`G g G^T` as a map of the kernel's 9 taps (row-major) to the block's 16 (row i*4+j)."""

_SOURCE = """\
from numba import prange


def _winograd(x, u, y, geo, parts, vs, ms):
    # {tag}
    U = np.uint64
    n_img, c_in, h, w = x.shape
    m_out = y.shape[1]
    oh, ow = y.shape[2], y.shape[3]
    pt, pl, band_rows = geo[0], geo[1], geo[2]
    th = (oh + 1) // 2
    tw = (ow + 1) // 2
    nb = (th + band_rows - 1) // band_rows
    total = n_img * nb
    stride = vs.shape[3]  # blocks a band holds at most: the products' leading dimension
    utw = U(tw)
    rw = 2 * tw + 2
    for p in prange(parts):
        v = vs[p]
        mx = ms[p]
        rows = np.zeros((4, rw + 2), np.float32)
        ee = np.empty((4, tw + 1), np.float32)
        eo = np.empty((4, tw + 1), np.float32)
        o = np.empty((2, 2 * tw), np.float32)
        for job in range(p, total, parts):
            n = job // nb
            r0 = (job % nb) * band_rows
            r1 = min(th, r0 + band_rows)
            blocks = (r1 - r0) * tw
            for c in range(c_in):
                for ti in range(r0, r1):
                    # the patch rows, padded: rows[a, pl + k] = x[n, c, 2ti - pt + a, k]
                    for a in range(4):
                        yy = 2 * ti - pt + a
                        ua = U(a)
                        if 0 <= yy < h:
                            uy = U(yy)
                            for k in range(U(w)):
                                rows[ua, U(pl) + k] = x[n, c, uy, k]
                        else:
                            for k in range(U(rw)):
                                rows[ua, k] = 0.0
                    # B^T d down the columns, each row split into its even and odd columns
                    # (the same four lines twice: one store stream per array vectorizes)
                    for j in range(utw + U(1)):
                        k0 = U(2) * j
                        k1 = k0 + U(1)
                        d0, d1 = rows[U(0), k0], rows[U(1), k0]
                        d2, d3 = rows[U(2), k0], rows[U(3), k0]
                        ee[U(0), j] = d0 - d2
                        ee[U(1), j] = d1 + d2
                        ee[U(2), j] = d2 - d1
                        ee[U(3), j] = d1 - d3
                        d0, d1 = rows[U(0), k1], rows[U(1), k1]
                        d2, d3 = rows[U(2), k1], rows[U(3), k1]
                        eo[U(0), j] = d0 - d2
                        eo[U(1), j] = d1 + d2
                        eo[U(2), j] = d2 - d1
                        eo[U(3), j] = d1 - d3
                    # ... B along the rows: block j reads columns 2j .. 2j + 3
                    t0 = U((ti - r0) * tw)
                    for a in range(4):
                        ua = U(a)
                        q = ua * U(4)
                        for j in range(utw):
                            d0, d1 = ee[ua, j], eo[ua, j]
                            d2, d3 = ee[ua, j + U(1)], eo[ua, j + U(1)]
                            v[q, c, t0 + j] = d0 - d2
                            v[q + U(1), c, t0 + j] = d1 + d2
                            v[q + U(2), c, t0 + j] = d2 - d1
                            v[q + U(3), c, t0 + j] = d1 - d3
            for pos in range(16):
                u[pos].turnout_sgemm(c_in, v[pos], stride, mx[pos], stride, m_out, blocks, c_in)
            for m in range(m_out):
                um = U(m)
                for ti in range(r0, r1):
                    t0 = U((ti - r0) * tw)
                    for j in range(utw):
                        t = t0 + j
                        a0 = mx[U(0), um, t] + mx[U(1), um, t] + mx[U(2), um, t]
                        b0 = mx[U(1), um, t] - mx[U(2), um, t] - mx[U(3), um, t]
                        a1 = mx[U(4), um, t] + mx[U(5), um, t] + mx[U(6), um, t]
                        b1 = mx[U(5), um, t] - mx[U(6), um, t] - mx[U(7), um, t]
                        a2 = mx[U(8), um, t] + mx[U(9), um, t] + mx[U(10), um, t]
                        b2 = mx[U(9), um, t] - mx[U(10), um, t] - mx[U(11), um, t]
                        a3 = mx[U(12), um, t] + mx[U(13), um, t] + mx[U(14), um, t]
                        b3 = mx[U(13), um, t] - mx[U(14), um, t] - mx[U(15), um, t]
                        o[U(0), U(2) * j] = a0 + a1 + a2
                        o[U(0), U(2) * j + U(1)] = b0 + b1 + b2
                        o[U(1), U(2) * j] = a1 - a2 - a3
                        o[U(1), U(2) * j + U(1)] = b1 - b2 - b3
                    for r in range(2):
                        yy = 2 * ti + r
                        if yy < oh:
                            uy = U(yy)
                            ur = U(r)
                            for k in range(U(ow)):
                                y[n, m, uy, k] = o[ur, k]
"""


def winograd_applies(
    dt: np.dtype[Any],
    w_shape: Any,
    group: int,
    strides: Any,
    dilations: Any,
    pixels: int,
) -> bool:
    """Whether a conv runs as Winograd F(2x2, 3x3): float32 on a host with the AVX-512 tile, a
    2-D 3x3 kernel, stride and dilation 1, one group, at least `WINO_MIN_CHANNELS` inputs,
    `WINO_MIN_OUTPUTS` outputs and `WINO_MIN_PIXELS` output pixels an image."""
    return (
        sgemm_tile.AVAILABLE
        and sgemm_tile.LANES >= 16
        and dt == np.float32
        and len(w_shape) == 4
        and tuple(w_shape[2:]) == (3, 3)
        and group == 1
        and all(int(s) == 1 for s in strides)
        and all(int(d) == 1 for d in dilations)
        and w_shape[1] >= WINO_MIN_CHANNELS
        and w_shape[0] >= WINO_MIN_OUTPUTS
        and pixels >= WINO_MIN_PIXELS
    )


def transform_weights(w: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """(16, M, C) float32: `G g G^T` of each output and input channel's 3x3 kernel, in float64:
    one product by `_T`, 16 x 9 (an einsum over the kernels took 41 ms for 512 x 512 at
    the first run, this 9.5 ms, with the same floats out)."""
    m, c = w.shape[:2]
    u = _T @ w.reshape(m * c, 9).T.astype(np.float64)
    return np.ascontiguousarray(u.reshape(16, m, c), dtype=np.float32)


_FREE: list[np.ndarray[Any, Any]] = []
"""Scratch buffers not in use, shared by every Winograd conv of the process: a run's nodes
take one in turn, so a model holds about one band's worth (per thread) whatever its number of
convs; runs at the same time each take their own."""


_FREE_LOCK = threading.Lock()


def _take(size: int) -> np.ndarray[Any, Any]:
    """A float32 buffer of at least `size` elements: the largest free one if it is enough,
    else a new one (the smaller one is dropped)."""
    with _FREE_LOCK:
        buf = _FREE.pop() if _FREE else None
    return buf if buf is not None and buf.size >= size else np.empty(size, np.float32)


def _give_back(buf: np.ndarray[Any, Any]) -> None:
    with _FREE_LOCK:
        _FREE.append(buf)
        _FREE.sort(key=len)


class Winograd:
    """The compiled kernel of one node and its weights' transform (kept while read-only)."""

    def __init__(self, ctx: BuildContext) -> None:
        text = _SOURCE.format(tag=sgemm_tile.TAG)
        fn = cache.load_source(text, "winograd")._winograd
        f32 = np.dtype(np.float32)
        sig = types.void(
            numba_array(f32, 4, readonly=True, layout="C"),
            numba_array(f32, 3, readonly=True, layout="C"),
            numba_array(f32, 4, readonly=False, layout="C"),
            numba_array(np.dtype(np.int64), 1, readonly=True, layout="C"),
            types.int64,
            numba_array(f32, 4, readonly=False, layout="C"),
            numba_array(f32, 4, readonly=False, layout="C"),
        )
        # one variant, parallel where the session has threads: a Winograd conv is always
        # past `SERIAL_WORK`, and loading the serial one too took 15-40 ms of the session
        self._kern = cache.jit(fn, [sig], parallel=ctx.parallel)
        self._weights: tuple[Any, Any] | None = None  # (the read-only W, its transform)

    def transformed(self, w: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """W's transform: the one kept when `w` is the read-only array it was made from."""
        kept = self._weights
        if kept is not None and kept[0] is w:
            return kept[1]  # type: ignore[no-any-return]
        u = transform_weights(w)
        if not w.flags.writeable:
            self._weights = (w, u)
        return u

    def __call__(
        self, x: np.ndarray[Any, Any], w: np.ndarray[Any, Any], y4: np.ndarray[Any, Any],
        pads: tuple[int, int], threads: int,
    ) -> None:  # fmt: skip
        """y4 (N, M, OH, OW) = the 3x3 stride-1 conv of x (N, C, H, W) by w (M, C, 3, 3),
        with `pads` (top, left) zeros before the input (no bias: the caller's epilogue)."""
        n, c = x.shape[:2]
        m, oh, ow = y4.shape[1:]
        tw = (ow + 1) // 2
        th = (oh + 1) // 2
        # as few bands as fit BAND_BYTES, then as many as make every thread's share equal
        per_image = -(-th // max(1, BAND_BYTES // (64 * (c + m) * tw)))
        if threads > 1:
            per_image = max(per_image, -(-threads // n))
            while per_image < th and (n * per_image) % threads:
                per_image += 1
        band_rows = -(-th // per_image)
        bands = n * -(-th // band_rows)
        parts = max(1, min(threads, bands))
        blocks = band_rows * tw
        nv, nm = parts * 16 * c * blocks, parts * 16 * m * blocks
        buf = _take(nv + nm)
        v = buf[:nv].reshape(parts, 16, c, blocks)
        mx = buf[nv : nv + nm].reshape(parts, 16, m, blocks)
        geo = np.array([pads[0], pads[1], band_rows], np.int64)
        try:
            self._kern(x, self.transformed(w), y4, geo, parts, v, mx)
        finally:
            _give_back(buf)
