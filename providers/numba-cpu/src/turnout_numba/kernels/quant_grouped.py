"""Grouped and depthwise ConvInteger / QLinearConv on 8-bit inputs: one compiled call for the
whole convolution, taps walked directly.

A depthwise convolution (one input channel per group) does a handful of multiply-adds per
output (9 for 3x3): as a GEMM per group it is one weight row against a patch matrix, and the
per-group calls and patch setup cost far more than the taps (MobileNet-style OCR models spent
nine tenths of their time there). Here one parallel loop runs over (image, group): the group's
input channels are copied once, less the zero point, into an int16 buffer with a border of
zeros for the padding (a padded pixel is the real value 0, as the ONNX reference pads
`x - x_zero_point`), split by stride phase (row r at r % SH, r // SH; columns alike), so that
for every tap the inputs of all output pixels lie at one offset of one contiguous run: the
plane is computed at the padded width (the few columns past the output's are not stored),
each tap one long `acc += w * run` loop that vectorizes, whatever the stride or dilation.

Sums are exact int32, as onnxruntime's. The store is the int32 sum (ConvInteger) or
onnxruntime's requantization (`quant_gemm`: `float32(sum + bias) * multiplier`, clamped to the
output type less its zero point, rounded half to even, plus the zero point): bit-equal to
onnxruntime, per-tensor or per-output-channel weight zero points and scales.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from ..codegen import numba_array
from ..registry import BuildContext, SizedKernel
from .quant_gemm import Params, int_range

__all__ = ["GROUPED_MAX_CHANNELS", "GroupedConv"]

GROUPED_MAX_CHANNELS = 8
"""Input channels per group up to which the direct kernel runs; wider groups have enough work
per output for the GEMM (`quant_gemm`, `quant_vnni`) to win."""

Array = np.ndarray[Any, Any]

_UNITUPLE: Any = types.UniTuple  # (numba's type constructors are untyped)
_GEO = _UNITUPLE(types.int64, 8)  # (KH, KW, SH, SW, DH, DW, top pad, left pad)


def _grouped(
    x: Any, xz: Any, w: Any, y: Any, mult: Any, mr: Any, bias: Any, br: Any, zp: Any,
    lo: Any, hi: Any, requant: Any, geo: Any,
) -> None:  # pragma: no cover - compiled by numba  # fmt: skip
    """y[n, m] = store(sum over the group's channels and taps of (x - xz) * w[m])."""
    kh, kw, sh, sw, dh, dw, pt, pl = geo
    n_, c_, h_, w_ = x.shape
    m_, cg = w.shape[0], w.shape[1]
    oh_, ow_ = y.shape[2], y.shape[3]
    groups = c_ // cg
    mg = m_ // groups
    hp = (oh_ - 1) * sh + (kh - 1) * dh + 1  # padded rows and columns the windows read
    wp = (ow_ - 1) * sw + (kw - 1) * dw + 1
    hq = (hp + sh - 1) // sh  # rows and columns per stride phase
    wq = (wp + sw - 1) // sw
    block = hq * wq
    span = oh_ * wq  # output rows at the padded width: the columns past ow_ are not stored
    flo = np.float32(lo - zp)
    fhi = np.float32(hi - zp)
    offs = np.empty(kh * kw, np.int64)  # where each tap's run starts in a channel's buffer
    for i in range(kh):
        for j in range(kw):
            phase = ((i * dh) % sh) * sw + (j * dw) % sw
            offs[i * kw + j] = phase * block + ((i * dh) // sh) * wq + (j * dw) // sw
    for t in prange(n_ * groups):
        n = t // groups
        g = t - n * groups
        # the group's channels less the zero point, zeros around: padded row r and column q
        # at [channel, (r % sh) * sw + q % sw, r // sh, q // sw] (flat, a row's slack after)
        buf = np.zeros((cg, sh * sw * block + wq), np.int16)
        q0 = max(0, pl)
        q1 = min(wp, w_ + pl)
        for ci in range(cg):
            src = x[n, g * cg + ci]
            dst = buf[ci]
            for r in range(max(0, pt), min(hp, h_ + pt)):
                srow = src[r - pt]
                for ph in range(sw):
                    k0 = max((q0 - ph + sw - 1) // sw, 0)
                    k1 = (q1 - ph + sw - 1) // sw
                    if k1 <= k0:
                        continue
                    start = ((r % sh) * sw + ph) * block + (r // sh) * wq
                    # (slices, so that every index below is a range's: no negative-index fixups)
                    s_ = srow[k0 * sw + ph - pl :]
                    d_ = dst[start + k0 : start + k1]
                    if sw == 1:
                        for k in range(d_.shape[0]):
                            d_[k] = np.int16(s_[k]) - xz
                    elif sw == 2:  # (a constant stride: the loads vectorize)
                        for k in range(d_.shape[0]):
                            d_[k] = np.int16(s_[k * 2]) - xz
                    else:
                        for k in range(d_.shape[0]):
                            d_[k] = np.int16(s_[k * sw]) - xz
        acc = np.empty(span, np.int32)
        for m in range(g * mg, (g + 1) * mg):
            wm = w[m]
            acc[:] = 0
            for ci in range(cg):
                wc = wm[ci]
                bc = buf[ci]
                for tap in range(kh * kw):
                    wv = np.int32(wc[tap // kw, tap % kw])
                    run = bc[offs[tap] : offs[tap] + span]
                    for p in range(span):
                        acc[p] += wv * np.int32(run[p])
            s = mult[m * mr]
            b = bias[m * br]
            ym = y[n, m]
            for oh in range(oh_):
                yr = ym[oh]
                ar = acc[oh * wq : oh * wq + ow_]
                if requant:
                    for o in range(ow_):
                        v = np.float32(ar[o] + b) * s
                        v = max(v, flo)
                        v = min(v, fhi)
                        v = (v + np.float32(12582912.0)) - np.float32(12582912.0)
                        yr[o] = np.int32(v) + zp
                else:
                    for o in range(ow_):
                        yr[o] = ar[o]


def _kernel(ctx: BuildContext, x: np.dtype[Any], out: np.dtype[Any]) -> SizedKernel:
    vec_f = numba_array(np.dtype(np.float32), 1, readonly=True, layout="C")
    vec_i = numba_array(np.dtype(np.int32), 1, readonly=True, layout="C")
    sig = types.void(
        numba_array(x, 4, readonly=True, layout="C"), types.int16,
        numba_array(np.dtype(np.int16), 4, readonly=True, layout="C"),
        numba_array(out, 4, readonly=False, layout="C"),
        vec_f, types.int64, vec_i, types.int64, types.int32, types.int32, types.int32,
        types.boolean, _GEO,
    )  # fmt: skip
    return ctx.jit(_grouped, [sig])


class GroupedConv:
    """The compiled kernel for one node's input and output types; `__call__` runs it."""

    def __init__(self, ctx: BuildContext, x: Any, out: Any, requant: bool) -> None:
        self.out = np.dtype(out)
        self.requant = requant
        self.lo, self.hi = int_range(self.out) if requant else (0, 0)
        self.kernel = _kernel(ctx, np.dtype(x), self.out)

    @staticmethod
    def pack(w: Array, wz: Any) -> Array:
        """W (M, C/group, KH, KW) less its zero point (per tensor or per output channel) as
        int16, done once for a constant W."""
        z = np.zeros((), np.int16) if wz is None else np.asarray(wz).astype(np.int16)
        z = z.reshape(-1, 1, 1, 1) if z.size > 1 else z.reshape(())
        packed = np.ascontiguousarray(w.astype(np.int16) - z)
        packed.flags.writeable = False
        return packed

    def __call__(
        self,
        x4: Array,
        xz: int,
        w16: Array,
        y4: Array,
        window: tuple[int, ...],
        pads: tuple[int, int],
        params: tuple[Params, Params, Params],
    ) -> None:
        """y4 (N, M, OH, OW) from x4 (N, C, H, W) and the packed weights; `window` is
        (KH, KW, SH, SW, DH, DW, OH, OW), `pads` the top and left pads (negative: cropped)."""
        mult, bias, zp = params
        x4 = np.ascontiguousarray(x4)
        geo = (*window[:6], *pads)
        work = y4.size * max(w16[0].size, 1)
        self.kernel(
            work, x4, np.int16(xz), w16, y4, mult.data, mult.r, bias.data, bias.r,
            np.int32(zp.data[0]), self.lo, self.hi, self.requant, geo,
        )  # fmt: skip
