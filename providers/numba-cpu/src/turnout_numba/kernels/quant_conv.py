"""ConvInteger and QLinearConv on 8-bit inputs (any uint8/int8 mix), 1-D and 2-D, any group,
stride, dilation and padding, through the integer GEMM of `quant_gemm`.

Per image: one pass lays the input out channels-last, less its zero point, as int16 with a
border of zeros for the padding (a padded pixel is the real value 0, as the ONNX reference
pads `x - x_zero_point`); then, per group, the GEMM takes the weights (M/group rows, shifted
and reordered to (KH, KW, C/group) once when the kernel is built for a constant W) against
each output pixel's patch read in place (no im2col copy: with one group and no column
dilation, a kernel row's taps are one contiguous run of KW*C values; otherwise each tap is a
run of C/group channels; `quant_gemm.Rows`).

On the VNNI tiles (`quant_vnni`) the input is uint8 channels-last (int8 flipped to x + 128,
the padding holding the zero point) and the tiles' (pixels, channels) sums are stored
transposed; a pointwise convolution (1x1, stride 1, no padding, one group) is instead a plain
product, the weights as A and the input packed per image as B, stored as it comes.

A grouped convolution of few channels per group (depthwise above all) runs `quant_grouped`'s
direct kernel instead: one call for every group, taps walked in place.

Zero points: x per tensor; w per tensor or per output channel. QLinearConv's bias is added to
the int32 sums, its output requantized as onnxruntime does (multiplier `x_scale * w_scale /
y_scale` in float32, per tensor or per output channel): bit-equal to onnxruntime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.constants import constant_input
from turnout.sdk.semantics.geometry import conv_geometry, spatial_attrs

from ..codegen import numba_array
from ..registry import BuildContext, SizedKernel, numba_kernel
from .quant_gemm import NO_PARAMS, IntGemm, Params, Rows
from .quant_grouped import GROUPED_MAX_CHANNELS, GroupedConv
from .quant_matmul import eight_bit_applies
from .quant_vnni import AVAILABLE as VNNI
from .quant_vnni import COLS, VnniB, VnniGemm, row_blocks

_ONE_RUN = np.zeros(1, np.int64)

__all__: list[str] = []

Array = np.ndarray[Any, Any]


def _channels_last(x: Any, zp: Any, xp: Any, pt: Any, pl: Any) -> None:  # pragma: no cover
    """xp[h + pt, w + pl, c] = x[c, h, w] - zp (xp's border is left as it is: zeros)."""
    c_, h_, w_ = x.shape
    for h in prange(h_):
        for w in range(w_):
            d = xp[h + pt, w + pl]
            for c in range(c_):
                d[c] = np.int16(x[c, h, w]) - zp


def _channels_last8(x: Any, flip: Any, xp: Any, pt: Any, pl: Any) -> None:  # pragma: no cover
    """xp[h + pt, w + pl, c] = x[c, h, w] ^ flip (int8 read as uint8, flipped to x + 128)."""
    c_, h_, w_ = x.shape
    for h in prange(h_):
        for w in range(w_):
            d = xp[h + pt, w + pl]
            for c in range(c_):
                d[c] = x[c, h, w] ^ flip


def _pack_pixels(x: Any, flip: Any, fill: Any, out: Any, colsum: Any) -> None:  # pragma: no cover
    """A pointwise convolution's input (C, P) as the VNNI tiles' B: out[b, q, i, k] = pixel
    b * 32 + i, channel q * 4 + k, as int8 (uint8 less 128: its bits flipped), `fill` past
    the channels and pixels; colsum[p] = the sum of pixel p's values. Whole blocks (32 pixels,
    4 channels) are copied without a test per value: 4 rows of 32 bytes into 128 bytes."""
    c_, p_ = x.shape
    nb, kq = out.shape[0], out.shape[1]
    qf = c_ // 4  # channel words inside C
    for b in prange(nb):
        p0 = b * 32
        cs = colsum[p0 : p0 + 32]
        for i in range(32):
            cs[i] = 0
        whole = p0 + 32 <= p_
        for q in range(kq):
            o = out[b, q]
            if whole and q < qf:
                r0 = x[q * 4, p0 : p0 + 32]
                r1 = x[q * 4 + 1, p0 : p0 + 32]
                r2 = x[q * 4 + 2, p0 : p0 + 32]
                r3 = x[q * 4 + 3, p0 : p0 + 32]
                for i in range(32):
                    v0 = np.int8(r0[i] ^ flip)
                    v1 = np.int8(r1[i] ^ flip)
                    v2 = np.int8(r2[i] ^ flip)
                    v3 = np.int8(r3[i] ^ flip)
                    o[i, 0] = v0
                    o[i, 1] = v1
                    o[i, 2] = v2
                    o[i, 3] = v3
                    cs[i] += np.int32(v0) + np.int32(v1) + np.int32(v2) + np.int32(v3)
            else:
                for i in range(32):
                    for k in range(4):
                        ch = q * 4 + k
                        p = p0 + i
                        v = np.int8(x[ch, p] ^ flip) if ch < c_ and p < p_ else np.int8(fill)
                        o[i, k] = v
                        cs[i] += np.int32(v)


def _pack_pixels_kernel(ctx: BuildContext) -> SizedKernel:
    sig = types.void(
        numba_array(np.dtype(np.uint8), 2, readonly=True, layout="C"), types.uint8, types.uint8,
        numba_array(np.dtype(np.int8), 4, readonly=False, layout="C"),
        numba_array(np.dtype(np.int32), 1, readonly=False, layout="C"),
    )  # fmt: skip
    return ctx.jit(_pack_pixels, [sig])


@dataclass(frozen=True)
class _WeightRows:
    """A pointwise convolution's weights as the VNNI tiles' A (rows = output channels): uint8
    (int8 plus 128) with K padded to whole words, their zero point in that domain, row sums."""

    a: Array  # flat (M * K4) uint8
    az: Array  # int32, 1 or M values
    rowsum: Array  # int32 (M,)
    k4: int
    tiles: tuple[Any, Any]  # `row_blocks` of the M rows


@dataclass(frozen=True)
class _Taps:
    """A grouped convolution's weights for `quant_grouped`: (M, C/group, KH, KW) int16."""

    w16: Array


def _layout8_kernel(ctx: BuildContext) -> SizedKernel:
    u8 = np.dtype(np.uint8)
    sig = types.void(
        numba_array(u8, 3, readonly=True, layout="A"), types.uint8,
        numba_array(u8, 3, readonly=False, layout="C"), types.int64, types.int64,
    )  # fmt: skip
    return ctx.jit(_channels_last8, [sig])


def _layout_kernel(ctx: BuildContext) -> SizedKernel:
    i16_3 = numba_array(np.dtype(np.int16), 3, readonly=False, layout="C")
    sigs = [
        types.void(
            numba_array(np.dtype(dt), 3, readonly=True, layout="A"),
            *(types.int16, i16_3, types.int64, types.int64),
        )
        for dt in ("uint8", "int8")
    ]
    return ctx.jit(_channels_last, sigs)


@dataclass(frozen=True)
class _Plan:
    """What a run at one (X shape, W shape) needs, computed on its first run."""

    final: tuple[int, ...]  # the output shape
    x4: tuple[int, int, int, int]  # X as (N, C, H, W)
    padded: tuple[int, int, int]  # the channels-last buffer (H + pads, W + pads, C)
    pads: tuple[int, int]  # (top, left)
    pixels: int  # OH * OW
    segs: tuple[Array, ...]  # per group, where a patch's runs start (see `quant_gemm.Rows`)
    seglen: int
    steps: tuple[int, int, int]  # (OW, row step, column step) of a patch's start
    window: tuple[int, ...]  # (KH, KW, SH, SW, DH, DW, OH, OW)
    tiles: tuple[Any, Any] | None  # the VNNI row blocks and starts, when it runs there


def _conv_applies(kn: KernelNode) -> str | None:
    q = kn.op_type == "QLinearConv"
    why = eight_bit_applies(kn, (0, 3) if q else (0, 1), outputs=q)
    if why:
        return why
    ranks = {len(i.shape) for i in kn.inputs[:1] if i is not None and i.shape is not None}
    if not ranks:
        return "input rank unknown at session creation"
    if not ranks <= {3, 4}:
        return f"{kn.op_type} of rank {max(ranks)}: only 1-D and 2-D are compiled by numba"
    return None


class _IntConv:
    """ConvInteger (`requant` False) or QLinearConv; `run_*` are the kernel functions."""

    def __init__(self, kn: KernelNode, ctx: BuildContext, requant: bool) -> None:
        self.kn = kn
        self.name = kn.name
        self.group = int(kn.attr("group", 1))
        self.w_index, self.wz_index = (3, 5) if requant else (1, 3)
        out = np.dtype(kn.outputs[0].dtype) if requant else np.dtype(np.int32)
        self.out = out
        variant = "requant" if requant else "int"
        self.gemm = IntGemm(ctx, variant, out)
        self.layout = _layout_kernel(ctx)
        self.vnni = VnniGemm(ctx, variant, out, transposed=True) if VNNI else None
        self.layout8 = _layout8_kernel(ctx) if VNNI else None
        # a pointwise convolution (1x1, stride 1, no padding, one group) is a plain product of
        # the weights and the input as it is: output rows are channels, no transposition
        strides = kn.attr("strides", None) or [1]
        pads = kn.attr("pads", None) or [0]
        self.pointwise = VNNI and self.group == 1 and all(v == 1 for v in strides) and not any(pads)
        self.rows8 = VnniGemm(ctx, variant, out, False, by_row=True) if self.pointwise else None
        self.pack_px = _pack_pixels_kernel(ctx) if self.pointwise else None
        self.grouped = (
            GroupedConv(ctx, kn.inputs[0].dtype, out, requant) if self.group > 1 else None
        )
        self.plans: dict[tuple[Any, Any], _Plan] = {}
        self.kept: tuple[Any, Any, Array] | None = None  # (W, w zero point, packed)
        w = self._const(self.w_index)
        has_zp = len(kn.node.inputs) > self.wz_index and bool(kn.node.inputs[self.wz_index])
        wz = self._const(self.wz_index) if has_zp else None
        if w is not None and w.ndim in (3, 4) and (wz is not None or not has_zp):
            self.kept = (w, wz, self._pack(w, wz))

    def _channels8(self, c: int, cg: int) -> int | None:
        """The channels of the VNNI layout, None where the int16 kernel runs: one group's C
        rounded up to whole 4-byte words (the extra channels hold the zero point, against
        weights of 0 after their zero point: they add nothing), or C when every group's C is
        whole words."""
        if self.vnni is None:
            return None
        if self.group == 1:
            return -(-c // 4) * 4
        return c if cg % 4 == 0 else None

    def _const(self, i: int) -> Array | None:
        if not constant_input(self.kn, i):
            return None
        v = self.kn.node.graph.initializers.get(self.kn.node.inputs[i])
        return v if isinstance(v, np.ndarray) else None

    def _pack(self, w: Array, wz: Any) -> Any:
        """W as the kernel that will run reads it: VNNI rows for a pointwise convolution,
        VNNI tiles per group, taps for the direct grouped kernel, else int16 rows."""
        if self._direct(w):
            self._check_zero(w, wz)
            w4 = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]) if w.ndim == 3 else w
            return _Taps(GroupedConv.pack(w4, wz))
        if self.pointwise and w.ndim in (3, 4) and all(k == 1 for k in w.shape[2:]):
            return self._pack_rows(w, wz)
        if w.ndim in (3, 4) and self._channels8(w.shape[1] * self.group, w.shape[1]) is not None:
            return self._pack8(w, wz)
        return self._pack16(w, wz)

    def _direct(self, w: Array) -> bool:
        """Whether W runs on the direct grouped kernel: groups of few input channels."""
        return self.grouped is not None and w.ndim in (3, 4) and w.shape[1] <= GROUPED_MAX_CHANNELS

    def _pack8(self, w: Array, wz: Any) -> list[VnniB]:
        """Per group, W (M/group, C/group, KH, KW) as B (K, M/group), K in patch order (KH, KW,
        C/group), packed for the VNNI tiles in the runs the patches are read in."""
        self._check_zero(w, wz)
        m, group = w.shape[0], self.group
        mg = m // group if group > 0 else m
        w4 = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]) if w.ndim == 3 else w
        c8 = self._channels8(w4.shape[1] * group, w4.shape[1])
        if group == 1 and c8 is not None and c8 > w4.shape[1]:  # whole words: zero points
            fill = np.zeros((), w.dtype) if wz is None else wz.reshape(-1, 1, 1, 1)
            extra = np.broadcast_to(fill, (m, c8 - w4.shape[1], *w4.shape[2:])).astype(w.dtype)
            w4 = np.concatenate([w4, extra], axis=1)
        dilations = self.kn.attr("dilations", None) or [1]
        runs = w4.shape[2] if group == 1 and dilations[-1] == 1 else w4.shape[2] * w4.shape[3]
        out = []
        for g in range(group):
            b = np.moveaxis(w4[g * mg : (g + 1) * mg], 1, 3).reshape(mg, -1).T
            z = wz if wz is None or wz.size == 1 else wz[g * mg : (g + 1) * mg]
            out.append(VnniB.of(np.ascontiguousarray(b), z, runs))
        return out

    def _pack_rows(self, w: Array, wz: Any) -> _WeightRows:
        self._check_zero(w, wz)
        m, c = w.shape[:2]
        k4 = -(-c // 4) * 4
        off = 128 if w.dtype == np.int8 else 0
        a = np.zeros((m, k4), np.uint8)
        a[:, :c] = (w.reshape(m, c).astype(np.int16) + off).astype(np.uint8)
        az = np.zeros(1, np.int32) if wz is None else np.asarray(wz).astype(np.int32).reshape(-1)
        rowsum = a.sum(axis=1, dtype=np.int32)
        a.flags.writeable = False
        return _WeightRows(a.reshape(-1), az + off, rowsum, k4, row_blocks(m, m, k4, k4))

    def _check_zero(self, w: Array, wz: Any) -> None:
        m = w.shape[0]
        if wz is not None and wz.dtype != w.dtype:
            raise InvalidArgument(
                f"{self.name}: w_zero_point type {wz.dtype} differs from W type {w.dtype}"
            )
        if wz is not None and wz.size > 1 and wz.shape != (m,):
            raise InvalidArgument(
                f"{self.name}: w_zero_point must be a scalar or have shape ({m},), got {wz.shape}"
            )

    def _pack16(self, w: Array, wz: Any) -> Array:
        """W less its zero point as (M, KH*KW*C/group) int16, patch order (KH, KW, C/group)."""
        self._check_zero(w, wz)
        m = w.shape[0]
        z = np.zeros((), np.int16) if wz is None else np.asarray(wz).astype(np.int16)
        z = z.reshape(m, 1, 1, 1) if z.size > 1 else z.reshape(())
        w4 = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]) if w.ndim == 3 else w
        packed = np.ascontiguousarray(np.moveaxis(w4.astype(np.int16) - z, 1, 3)).reshape(m, -1)
        packed.flags.writeable = False
        return packed

    def _weights(self, w: Array, wz: Any) -> Any:
        kept = self.kept
        if kept is not None and kept[0] is w and kept[1] is wz:
            return kept[2]
        packed = self._pack(w, wz)
        if not w.flags.writeable and (wz is None or not wz.flags.writeable):
            self.kept = (w, wz, packed)
        return packed

    def _plan(self, x: Array, w: Array) -> _Plan:
        name, group, kn = self.name, self.group, self.kn
        if x.ndim not in (3, 4) or w.ndim != x.ndim:
            raise InvalidArgument(f"{name}: X {x.shape} and W {w.shape} must both be 3-D or 4-D")
        kernel = list(kn.attr("kernel_shape", None) or w.shape[2:])
        if tuple(kernel) != tuple(w.shape[2:]):
            raise InvalidArgument(f"{name}: kernel_shape {kernel} does not match W {w.shape}")
        strides, dilations = spatial_attrs(kn, x.ndim - 2, kernel)
        pb, pe, out = conv_geometry(kn, x.shape[2:], kernel, strides, dilations)
        n_, c_ = x.shape[:2]
        m_ = w.shape[0]
        if group <= 0 or c_ != w.shape[1] * group or m_ % group:
            raise InvalidArgument(
                f"{name}: input channels {c_} and weight shape {w.shape} do not match group={group}"
            )
        final = (n_, m_, *out)
        if x.ndim == 3:  # 1-D as 2-D with a unit height
            kernel, strides, dilations = [1, *kernel], [1, *strides], [1, *dilations]
            pb, pe, out = [0, *pb], [0, *pe], [1, *out]
            x4 = (n_, c_, 1, x.shape[2])
        else:
            x4 = (n_, c_, x.shape[2], x.shape[3])
        h, wd = x4[2], x4[3]
        oh, ow = out
        # rows/columns the windows read: the input plus its padding (an end pad the windows
        # never reach is left out; a negative end pad crops)
        hp = max(h + pb[0], (oh - 1) * strides[0] + (kernel[0] - 1) * dilations[0] + 1, 1)
        wp = max(wd + pb[1], (ow - 1) * strides[1] + (kernel[1] - 1) * dilations[1] + 1, 1)
        cg = w.shape[1]
        (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
        c8 = self._channels8(c_, cg)
        ch = c_ if c8 is None else c8  # channels of the channels-last layout
        line = wp * ch  # values per padded row
        if group == 1 and dw == 1:  # a kernel row's taps are one run of KW * C values
            runs = [[i * dh * line for i in range(kh)]]
            seglen = kw * ch
        else:
            runs = [
                [i * dh * line + j * dw * ch + g * cg for i in range(kh) for j in range(kw)]
                for g in range(group)
            ]
            seglen = ch if group == 1 else cg
        segs = tuple(np.array(r, np.int64) for r in runs)
        steps = (ow, sh * line, sw * ch)
        window = (kh, kw, sh, sw, dh, dw, oh, ow)
        tiles = None if c8 is None else row_blocks(oh * ow, ow, sh * line, sw * ch)
        return _Plan(
            final, x4, (hp, wp, ch), (pb[0], pb[1]), oh * ow, segs, seglen, steps, window, tiles
        )

    def conv(
        self, x: Array, xz: Any, w: Array, wz: Any, params: tuple[Params, Params, Params] | None
    ) -> Array:
        """The int32 convolution (`params` None) or its requantization by `params`
        (multiplier, bias, zero point, per output channel or per tensor)."""
        name = self.name
        if xz is not None and (xz.dtype != x.dtype or xz.size != 1):
            raise InvalidArgument(
                f"{name}: x_zero_point must be a scalar of X's type {x.dtype}, "
                f"got {xz.dtype} {xz.shape}"
            )
        key = (x.shape, w.shape)
        p = self.plans.get(key)
        if p is None:  # pads/auto_pad/output size: the same for every run at these shapes
            p = self.plans[key] = self._plan(x, w)
        wk = self._weights(w, wz)
        n_ = p.x4[0]
        m_ = w.shape[0]
        y = np.empty((n_, m_, p.pixels), self.out)
        if y.size == 0:
            return y.reshape(p.final)
        if isinstance(wk, _Taps):
            assert self.grouped is not None
            zval = 0 if xz is None else int(xz.reshape(()))
            y4 = y.reshape(n_, m_, *p.window[6:])
            x4 = x.reshape(p.x4)
            self.grouped(x4, zval, wk.w16, y4, p.window, p.pads, params or NO_PARAMS)
            return y.reshape(p.final)
        if isinstance(wk, _WeightRows):
            self._pointwise(x, xz, wk, p, y, params)
            return y.reshape(p.final)
        if p.tiles is not None:
            self._conv8(x, xz, wk, p, y, params)
            return y.reshape(p.final)
        group = self.group
        mg = m_ // group
        z = np.int16(0 if xz is None else int(xz.reshape(())))
        x4 = x.reshape(p.x4)
        pt, pl = p.pads
        xp = np.zeros(p.padded, np.int16)
        for n in range(n_):
            # (a negative begin pad crops: the layout reads the part that stays)
            xs = x4[n, :, max(0, -pt) :, max(0, -pl) :]
            xs = xs[:, : p.padded[0] - max(pt, 0), : p.padded[1] - max(pl, 0)]
            self.layout(xs.size, xs, z, xp, max(pt, 0), max(pl, 0))
            src = xp.reshape(-1)
            for g in range(group):
                rows = Rows(src, p.segs[g if len(p.segs) > 1 else 0], p.seglen, p.pixels, *p.steps)
                yg = y[n, g * mg : (g + 1) * mg]
                wg = wk[g * mg : (g + 1) * mg]
                if params is None:
                    self.gemm(wg, rows, yg)
                else:
                    mult, bias, zp = (_rows(q, g * mg, mg) for q in params)
                    self.gemm(wg, rows, yg, mult, bias, zp)
        return y.reshape(p.final)

    def _pointwise(
        self, x: Array, xz: Any, wr: _WeightRows, p: _Plan, y: Array, params: Any
    ) -> None:
        """y[n] = W . X[n] on the VNNI tiles, X packed as their B (pixels as columns)."""
        assert self.rows8 is not None and self.pack_px is not None
        if p.pixels != p.x4[2] * p.x4[3]:
            raise InvalidArgument(f"{self.name}: a pointwise convolution keeps the input size")
        flip = 0x80 if x.dtype == np.uint8 else 0
        zval = 0 if xz is None else int(xz.reshape(()))
        zero8 = zval - 128 if flip else zval  # X's zero point as the int8 B holds it
        n_, c_ = p.x4[:2]
        pix = p.pixels
        nb = -(-pix // COLS)
        packed = np.empty((nb, wr.k4 // 4, COLS, 4), np.int8)
        colsum = np.empty(nb * COLS, np.int32)
        zero = np.full(pix, zero8, np.int32)
        xu = x.view(np.uint8).reshape(n_, c_, pix)
        fill = np.uint8((zval & 0xFF) ^ flip)
        ps = NO_PARAMS if params is None else params
        for n in range(n_):
            self.pack_px(xu[n].size, xu[n], np.uint8(flip), fill, packed, colsum)
            vb = VnniB.raw(packed, wr.k4 // 4, pix, colsum, zero, wr.k4)
            self.rows8(wr.a, *wr.tiles, _ONE_RUN, vb, y.shape[1], y[n], wr.rowsum, wr.az, ps)

    def _conv8(self, x: Array, xz: Any, vbs: list[VnniB], p: _Plan, y: Array, params: Any) -> None:
        """The convolution on the VNNI tiles: the channels-last uint8 input (int8 flipped to
        x + 128, the padding holding the zero point) read as patch rows in place."""
        assert self.vnni is not None and self.layout8 is not None and p.tiles is not None
        off = 128 if x.dtype == np.int8 else 0
        zval = (0 if xz is None else int(xz.reshape(()))) + off
        az = np.full(1, zval, np.int32)
        xu = x.view(np.uint8).reshape(p.x4)
        pt, pl = p.pads
        xp = np.full(p.padded, zval, np.uint8)
        mg = y.shape[1] // self.group
        cg = p.padded[2] // self.group
        for n in range(y.shape[0]):
            xs = xu[n, :, max(0, -pt) :, max(0, -pl) :]
            xs = xs[:, : p.padded[0] - max(pt, 0), : p.padded[1] - max(pl, 0)]
            self.layout8(xs.size, xs, np.uint8(off), xp, max(pt, 0), max(pl, 0))
            src = xp.reshape(-1)
            for g, vb in enumerate(vbs):
                rowsum = (
                    _patch_sums(xp[:, :, g * cg : (g + 1) * cg], p.window)
                    if vb.zero_points
                    else None
                )
                ps = NO_PARAMS if params is None else params
                if params is not None and self.group > 1:
                    ps = (_rows(params[0], g * mg, mg), _rows(params[1], g * mg, mg), params[2])
                segs = p.segs[g if len(p.segs) > 1 else 0]
                yg = y[n, g * mg : (g + 1) * mg]
                self.vnni(src, *p.tiles, segs, vb, p.pixels, yg, rowsum, az, ps)


def _patch_sums(xp: Array, window: tuple[int, ...]) -> Array:
    """The sum of each output pixel's patch (all channels of `xp`, every tap), int32."""
    kh, kw, sh, sw, dh, dw, oh, ow = window
    plane = xp.sum(axis=2, dtype=np.int32)
    tot = np.zeros((oh, ow), np.int32)
    for i in range(kh):
        for j in range(kw):
            tot += plane[
                i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw
            ]
    return tot.reshape(-1)


def _rows(q: Params, start: int, count: int) -> Params:
    """The rows [start, start + count) of a per-row parameter (a per-tensor one as it is)."""
    if not q.r:
        return q
    return Params(np.ascontiguousarray(q.data[start : start + count]), q.r, q.c)


def _build_conv_integer(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    conv = _IntConv(kn, ctx, requant=False)

    def run(x: Array, w: Array, xz: Any = None, wz: Any = None) -> tuple[Array]:
        return (conv.conv(x, xz, w, wz, None),)

    return run


def _per_channel(name: str, v: Any, what: str, m: int, dt: Any) -> Params:
    a = np.asarray(v).astype(dt).reshape(-1)
    if a.size == 1:
        return Params(a)
    if a.size != m:
        raise InvalidArgument(
            f"{name}: {what} must be a scalar or have shape ({m},), got {a.shape}"
        )
    return Params(np.ascontiguousarray(a), 1, 0)


def _build_qlinear_conv(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    conv = _IntConv(kn, ctx, requant=True)
    name = kn.name
    out = conv.out
    kept: list[Any] = [None]  # the last (scales, zero point, bias, M) and their parameters

    def params(
        x_s: Array, w_s: Array, y_s: Array, yz: Any, b: Any, m: int
    ) -> tuple[Params, Params, Params]:
        """The store's (multiplier, bias, zero point); computed once for constant inputs (the
        same read-only arrays every run)."""
        key = (x_s, w_s, y_s, yz, b)
        last = kept[0]
        if last is not None and last[1] == m and all(u is v for u, v in zip(last[0], key)):
            return last[2]  # type: ignore[no-any-return]
        if yz is not None and (yz.dtype != out or yz.size != 1):
            raise InvalidArgument(f"{name}: y_zero_point must be a scalar of type {out}")
        if np.size(x_s) != 1 or np.size(y_s) != 1:
            raise InvalidArgument(f"{name}: x_scale and y_scale must be scalars")
        ws = _per_channel(name, w_s, "w_scale", m, np.float32)
        xs = np.float32(np.asarray(x_s).reshape(()))
        ys = np.float32(np.asarray(y_s).reshape(()))
        mult = Params(np.ascontiguousarray(xs * ws.data / ys), ws.r, 0)
        bias = Params(np.zeros(1, np.int32))
        if b is not None:
            if b.shape != (m,):
                raise InvalidArgument(f"{name}: B shape {b.shape} must be ({m},)")
            bias = Params(np.ascontiguousarray(b, np.int32), 1, 0)
        zp = Params(np.zeros(1, np.int32) if yz is None else yz.astype(np.int32).reshape(1))
        result = (mult, bias, zp)
        if all(v is None or not np.asarray(v).flags.writeable for v in key):
            kept[0] = (key, m, result)
        return result

    def run(
        x: Array,
        x_s: Array,
        xz: Any,
        w: Array,
        w_s: Array,
        wz: Any,
        y_s: Array,
        yz: Any,
        b: Any = None,
    ) -> tuple[Array]:
        return (conv.conv(x, xz, w, wz, params(x_s, w_s, y_s, yz, b, w.shape[0])),)

    return run


numba_kernel("ConvInteger", since=10, applies=_conv_applies)(_build_conv_integer)
numba_kernel("QLinearConv", since=10, applies=_conv_applies)(_build_qlinear_conv)
