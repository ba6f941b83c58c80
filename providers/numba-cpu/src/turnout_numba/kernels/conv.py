"""Conv and FusedConv (ai.turnout) for 1-D and 2-D float inputs.

Three paths, chosen per call from the geometry:
- depthwise (one input channel per group): a direct loop per output plane, in parallel over
  planes; a GEMM per channel would be a 1-row matrix product;
- pointwise (1x1 kernel, stride 1, no padding): the input image already is the column matrix,
  so each group is one BLAS GEMM straight into the output;
- otherwise im2col: one parallel pass lays out the patches of an image as (C*KH*KW, OH*OW), rows
  ordered so that each group's rows are contiguous, then a BLAS GEMM per group writes its
  output channels in place (no transposes, no padded copy of the input).
The bias, FusedConv's residual input Z and its activation run after in one pass (`epilogue`).
Window geometry (pads, auto_pad, output size) is the CPU provider's, shared with Conv there.
3-D convolution and other dtypes stay with the numpy kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode
from turnout.providers.cpu.kernels.conv import _conv_setup
from turnout.providers.cpu.kernels.fused import activation_of

from ..codegen import numba_array
from ..registry import BuildContext, float_inputs_applies, numba_kernel
from .epilogue import Epilogue
from .gemm import present

__all__: list[str] = []


def _im2col(
    x: Any,
    col: Any,
    kh_: int,
    kw_: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    pt: int,
    pl: int,
    oh_: int,
    ow_: int,
) -> None:  # pragma: no cover - compiled by numba
    # Loops run over slices from 0 (numba then drops negative-index checks and LLVM
    # vectorizes the copies).
    c_, h_, w_ = x.shape
    kk = kh_ * kw_
    for r in prange(c_ * kk):
        c = r // kk
        ki = (r - c * kk) // kw_
        kj = r - c * kk - ki * kw_
        off = kj * dw - pl
        lo = 0 if off >= 0 else (-off + sw - 1) // sw
        t = w_ - 1 - off
        hi = min(t // sw + 1, ow_) if t >= 0 else 0
        lo = min(lo, hi)
        xc = x[c]
        for oh in range(oh_):
            dst = col[r, oh * ow_ : (oh + 1) * ow_]
            ih = oh * sh - pt + ki * dh
            if ih < 0 or ih >= h_:
                for o in range(ow_):
                    dst[o] = 0
                continue
            for o in range(lo):
                dst[o] = 0
            mid = dst[lo:hi]
            if sw == 1:
                src = xc[ih, lo + off : hi + off]
            else:
                src = xc[ih, lo * sw + off :: sw]
            for o in range(hi - lo):
                mid[o] = src[o]
            tail = dst[hi:]
            for o in range(ow_ - hi):
                tail[o] = 0


def _depthwise(
    x: Any,
    w: Any,
    y: Any,
    mg: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    pt: int,
    pl: int,
    oh_: int,
    ow_: int,
) -> None:  # pragma: no cover - compiled by numba
    # Per plane, the zero-padded input is split into sh x sw phase planes (phase (a, b) holds
    # padded pixels (i*sh + a, j*sw + b)), flattened with row length wq. Kernel tap (ki, kj)
    # then reads one phase at a fixed offset for every output, so each tap is one long
    # multiply-add over the flat (OH x wq) grid (the wq - OW extra columns per row are computed
    # and dropped): a few long vector loops per plane instead of short strided ones.
    n_, _, h_, w_ = x.shape
    m_, _, kh_, kw_ = w.shape
    hq = oh_ + (kh_ - 1) * dh // sh
    wq = ow_ + (kw_ - 1) * dw // sw
    plane = hq * wq
    span = oh_ * wq
    planes = n_ * m_
    # phase column j of phase b reads input column j*sw + b - pl: its valid j range, per b
    # (integer division is slow next to the few multiply-adds per row: done once here)
    jlo = np.empty(sw, np.int64)
    jhi = np.empty(sw, np.int64)
    for b in range(sw):
        off = b - pl
        t = w_ - 1 - off
        jhi[b] = min(t // sw + 1, wq) if t >= 0 else 0
        jlo[b] = min(0 if off >= 0 else (-off + sw - 1) // sw, jhi[b])
    chunks = min(planes, 64)  # scratch buffers are allocated (and zeroed) once per chunk
    for ch in prange(chunks):
        # the padding stays zero: every plane of a chunk writes the same valid positions
        buf = np.zeros(sh * sw * plane + wq, x.dtype)
        acc = np.empty(span, x.dtype)
        for q in range(ch * planes // chunks, (ch + 1) * planes // chunks):
            n = q // m_
            m = q - n * m_
            xp = x[n, m // mg]
            for a in range(sh):
                for i in range(hq):
                    r = i * sh + a - pt
                    if r < 0 or r >= h_:
                        continue
                    src = xp[r]
                    for b in range(sw):
                        j0, j1 = jlo[b], jhi[b]
                        if j1 <= j0:
                            continue
                        base = (a * sw + b) * plane + i * wq
                        dst = buf[base + j0 : base + j1]
                        s0 = j0 * sw + b - pl
                        if sw == 1:
                            seg = src[s0 : s0 + j1 - j0]
                            for j in range(j1 - j0):
                                dst[j] = seg[j]
                        else:
                            seg = src[s0::sw]
                            for j in range(j1 - j0):
                                dst[j] = seg[j]
            for ki in range(kh_):
                for kj in range(kw_):
                    wv = w[m, 0, ki, kj]
                    ph = ((ki * dh) % sh) * sw + (kj * dw) % sw
                    off = ph * plane + (ki * dh // sh) * wq + kj * dw // sw
                    src = buf[off : off + span]
                    if ki == 0 and kj == 0:
                        for p in range(span):
                            acc[p] = wv * src[p]
                    else:
                        for p in range(span):
                            acc[p] += wv * src[p]
            yp = y[n, m]
            for i in range(oh_):
                yr = yp[i]
                ar = acc[i * wq : i * wq + ow_]
                for o in range(ow_):
                    yr[o] = ar[o]


def _conv_applies(kn: KernelNode) -> str | None:
    why = float_inputs_applies(kn, 2, narrow=False)
    if why:
        return why
    ranks = {len(i.shape) for i in kn.inputs[:2] if i is not None and i.shape is not None}
    if not ranks:
        return "input ranks unknown at session creation"
    if not ranks <= {3, 4}:
        return f"{kn.op_type} of rank {max(ranks)}: only 1-D and 2-D are compiled by numba"
    if kn.op_type == "FusedConv":
        try:
            activation_of(kn)
        except InvalidArgument as e:
            return str(e)
    return None


def _build_conv(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    ints = [types.int64] * 10
    im2col = ctx.jit(
        _im2col,
        [
            types.void(
                numba_array(dt, 3, readonly=True, layout="C"),
                numba_array(dt, 2, readonly=False, layout="C"),
                *ints,
            )
        ],
    )
    depthwise = ctx.jit(
        _depthwise,
        [
            types.void(
                numba_array(dt, 4, readonly=True, layout="C"),
                numba_array(dt, 4, readonly=True, layout="C"),
                numba_array(dt, 4, readonly=False, layout="C"),
                *ints[:9],
            )
        ],
    )
    fused = kn.op_type == "FusedConv"
    act = activation_of(kn) if fused else ("", 0.0, 0.0)
    epilogue = Epilogue(dt, act, ctx.parallel, row=present(kn, 2), full=fused and present(kn, 3))
    group = int(kn.attr("group", 1))
    name = kn.name
    geometry: dict[tuple[Any, Any], tuple[Any, ...]] = {}  # (X shape, W shape) -> _conv_setup

    def run(x: Any, w: Any, b: Any = None, z: Any = None) -> tuple[Any]:
        if x.ndim not in (3, 4) or w.ndim != x.ndim:
            raise InvalidArgument(f"{name}: X {x.shape} and W {w.shape} must both be 3-D or 4-D")
        if x.dtype != dt or w.dtype != dt:
            raise InvalidArgument(f"{name}: X {x.dtype} and W {w.dtype} must both be {dt}")
        key = (x.shape, w.shape)
        setup = geometry.get(key)
        if setup is None:  # pads/auto_pad/output size: the same for every run at these shapes
            setup = geometry[key] = _conv_setup(kn, x, w)
        strides, dilations, pb, _pe, out = setup
        final_shape = (x.shape[0], w.shape[0], *out)
        n_, c_ = x.shape[:2]
        m_ = w.shape[0]
        if c_ != w.shape[1] * group or m_ % group:
            raise InvalidArgument(
                f"{name}: input channels {c_} and weight shape {w.shape} do not match group={group}"
            )
        if x.ndim == 3:  # 1-D as 2-D with a unit height
            x, w = x[:, :, None, :], w[:, :, None, :]
            strides, dilations, pb, out = [1, *strides], [1, *dilations], [0, *pb], [1, *out]
        x = np.ascontiguousarray(x)
        w = np.ascontiguousarray(w)
        oh_, ow_ = out
        p_ = oh_ * ow_
        y = np.empty((n_, m_, p_), dt)
        cg, mg = c_ // group, m_ // group
        geo = (*strides, *dilations, *pb, oh_, ow_)
        if y.size == 0:
            pass
        elif cg == 1:
            depthwise(y.size * w.shape[2] * w.shape[3], x, w, y.reshape(n_, m_, oh_, ow_), mg, *geo)
        else:
            _gemm_conv(x, w, y, group, geo, im2col)
        row = full = None
        if b is not None:
            if b.shape != (m_,):
                raise InvalidArgument(f"{name}: bias shape {b.shape} must be ({m_},)")
            row = np.ascontiguousarray(b, dtype=dt)
        if z is not None:
            try:
                zb = np.broadcast_to(z.astype(dt, copy=False), final_shape)
            except ValueError:
                raise InvalidArgument(
                    f"{name}: Z {z.shape} does not broadcast to the output {final_shape}"
                ) from None
            full = np.ascontiguousarray(zb).reshape(y.shape)
        epilogue(y, row=row, full=full)
        return (y.reshape(final_shape),)

    return run


def _gemm_conv(x: Any, w: Any, y: Any, group: int, geo: tuple[int, ...], im2col: Any) -> None:
    """im2col (or the input itself for a pointwise conv) then one BLAS GEMM per group."""
    n_, c_, h_, w_ = x.shape
    m_, cg, kh_, kw_ = w.shape
    sh, sw, dh, dw, pt, pl, oh_, ow_ = geo
    mg = m_ // group
    rows = cg * kh_ * kw_
    wg = w.reshape(group, mg, rows)
    pointwise = kh_ == kw_ == 1 and sh == sw == 1 and pt == pl == 0 and (oh_, ow_) == (h_, w_)
    col = None if pointwise else np.empty((c_ * kh_ * kw_, oh_ * ow_), x.dtype)
    for n in range(n_):
        if col is None:
            cols = x[n].reshape(c_, h_ * w_)
        else:
            im2col(col.size, x[n], col, kh_, kw_, sh, sw, dh, dw, pt, pl, oh_, ow_)
            cols = col
        for g in range(group):
            np.matmul(wg[g], cols[g * rows : (g + 1) * rows], out=y[n, g * mg : (g + 1) * mg])


numba_kernel("Conv", since=1, applies=_conv_applies)(_build_conv)
numba_kernel("FusedConv", since=1, domain="ai.turnout", applies=_conv_applies)(_build_conv)
