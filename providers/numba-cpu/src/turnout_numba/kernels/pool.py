"""MaxPool and AveragePool (1-D and 2-D spatial): one pass per output row, no padded input copy.

Both kernels see the input as (N*C, H, W) planes (1-D pools as H = 1) and run a parallel loop
over the planes. Per output row: the valid kernel rows are computed analytically and reduced
(max, or float64 sum) over the full width into a row buffer whose pad columns hold the
identity; a stride-1 sliding reduction over the kw taps follows, then every sw-th value is
taken. Every loop runs over contiguous memory with in-range indices (views), so they
vectorize; this is what makes these faster than the numpy kernel's strided slices.
Window geometry (auto_pad, pads, ceil_mode, dilations, output shape) comes from the CPU
provider's `conv_geometry`/`spatial_attrs`, shared with Conv and the numpy pools.

AveragePool divides by the number of taps inside the input, or (count_include_pad) inside the
explicitly padded input: taps that a ceil_mode window puts past the end padding never count,
as in the numpy kernel and onnxruntime. MaxPool treats NaN as the numpy kernel does (see
`_max_pool` there: onnxruntime's first-tap-then-strictly-greater rule).

MaxPool with an Indices output and 3-D pools run on the numpy kernel (declined here).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import from_dtype, prange, types

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode
from turnout.providers.cpu.kernels.conv import conv_geometry, spatial_attrs

from ..codegen import compute_dtype, numba_array
from ..registry import BuildContext, SizedKernel, numba_kernel

__all__: list[str] = []


def _max_pool(
    x: Any, y: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, ph: int, pw: int, low: Any
) -> None:  # pragma: no cover - compiled by numba
    # Per output row: a column pass (max of the kh input rows, full width) into a row buffer
    # padded with `low`, a stride-1 sliding max of the kw taps over it, then every sw-th value.
    # All three are plain contiguous loops (vectorized); np.maximum propagates NaN, so a NaN
    # output marks a window holding one, which `_max_pool_nan` then redoes.
    nc, h, w = x.shape
    oh_n, ow_n = y.shape[1], y.shape[2]
    n1 = (ow_n - 1) * sw + 1  # window starts (padded coordinates) at stride 1
    blen = max(pw + w, n1 + (kw - 1) * dw)
    for p in prange(nc):
        buf = np.empty(blen, x.dtype)
        s1 = np.empty(n1, x.dtype)
        for c in range(blen):
            buf[c] = low
        mid = buf[pw : pw + w]  # views: their loop indices are provably in range
        picks = s1[::sw]
        for oh in range(oh_n):
            h0 = oh * sh - ph
            ilo = (-h0 + dh - 1) // dh if h0 < 0 else 0
            ihi = min(kh, (h - h0 + dh - 1) // dh)
            if ilo < ihi:
                xr = x[p, h0 + ilo * dh]
                for c in range(w):
                    mid[c] = xr[c]
                for i in range(ilo + 1, ihi):
                    xr = x[p, h0 + i * dh]
                    for c in range(w):
                        mid[c] = np.maximum(mid[c], xr[c])
            else:
                for c in range(w):
                    mid[c] = low
            for c in range(n1):
                s1[c] = buf[c]
            for j in range(1, kw):
                tap = buf[j * dw : j * dw + n1]
                for c in range(n1):
                    s1[c] = np.maximum(s1[c], tap[c])
            yr = y[p, oh]
            for ow in range(ow_n):
                yr[ow] = picks[ow]


def _max_pool_nan(
    x: Any, y: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, ph: int, pw: int
) -> None:  # pragma: no cover - compiled by numba
    # The NaN outputs of _max_pool by onnxruntime's rule, as the numpy kernel: the first tap
    # inside the input, then only strictly greater values (NaN compares false). A kernel of its
    # own, run only when the output has a NaN: inside _max_pool it slowed every run by 20-40%.
    nc, h, w = x.shape
    oh_n, ow_n = y.shape[1], y.shape[2]
    for p in prange(nc):
        for oh in range(oh_n):
            h0 = oh * sh - ph
            for ow in range(ow_n):
                m = y[p, oh, ow]
                if m == m:
                    continue
                w0 = ow * sw - pw
                seen = False
                for i in range(kh):
                    r = h0 + i * dh
                    for j in range(kw):
                        c = w0 + j * dw
                        if 0 <= r < h and 0 <= c < w and (not seen or x[p, r, c] > m):
                            m = x[p, r, c]
                            seen = True
                y[p, oh, ow] = m


def _avg_pool(
    x: Any,
    y: Any,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    ph: int,
    pw: int,
    ch0: int,
    ch1: int,
    cw0: int,
    cw1: int,
) -> None:  # pragma: no cover - compiled by numba
    # _max_pool's three passes with float64 sums (zero padding); the divisor counts the taps
    # inside [ch0, ch1) x [cw0, cw1): the input, or the input with its explicit pads
    nc, h, w = x.shape
    oh_n, ow_n = y.shape[1], y.shape[2]
    n1 = (ow_n - 1) * sw + 1
    blen = max(pw + w, n1 + (kw - 1) * dw)
    cnt_w = np.empty(ow_n, np.float64)
    for ow in range(ow_n):
        w0 = ow * sw - pw
        a = (cw0 - w0 + dw - 1) // dw if w0 < cw0 else 0
        b = min(kw, (cw1 - w0 + dw - 1) // dw)
        cnt_w[ow] = max(b - a, 0)
    for p in prange(nc):
        buf = np.zeros(blen, np.float64)
        s1 = np.empty(n1, np.float64)
        mid = buf[pw : pw + w]
        picks = s1[::sw]
        for oh in range(oh_n):
            h0 = oh * sh - ph
            ilo = (-h0 + dh - 1) // dh if h0 < 0 else 0
            ihi = min(kh, (h - h0 + dh - 1) // dh)
            a = (ch0 - h0 + dh - 1) // dh if h0 < ch0 else 0
            b = min(kh, (ch1 - h0 + dh - 1) // dh)
            cnt_h = max(b - a, 0)
            for c in range(w):
                mid[c] = 0.0
            for i in range(ilo, ihi):
                xr = x[p, h0 + i * dh]
                for c in range(w):
                    mid[c] += xr[c]
            for c in range(n1):
                s1[c] = buf[c]
            for j in range(1, kw):
                tap = buf[j * dw : j * dw + n1]
                for c in range(n1):
                    s1[c] += tap[c]
            yr = y[p, oh]
            for ow in range(ow_n):
                yr[ow] = picks[ow] / (cnt_h * cnt_w[ow])


_MAX_DTYPES = ("float32", "float64", "int8", "uint8")


def _applies(kn: KernelNode) -> str | None:
    x = kn.inputs[0]
    if x is None or x.elem_type is None:
        return "input types unknown at session creation"
    c = compute_dtype(x.dtype)
    allowed = _MAX_DTYPES if kn.op_type == "MaxPool" else _MAX_DTYPES[:2]
    if c is None or c.name not in allowed:
        return f"{kn.op_type} on {x.dtype} is not compiled by numba"
    if kn.op_type == "MaxPool" and len(kn.node.outputs) > 1 and kn.node.outputs[1]:
        return "Indices output: numpy kernel"
    kernel = kn.attr("kernel_shape", None)
    if kernel is None:
        return "no kernel_shape"
    nd = len(kernel)
    if nd == 3:
        return "3-D pooling: numpy kernel"
    if nd not in (1, 2):
        return f"{nd}-D pooling: numpy kernel"
    if x.shape is not None and len(x.shape) != nd + 2:
        return f"input rank {len(x.shape)} does not match a {nd}-D kernel_shape"
    strides = kn.attr("strides", None) or [1] * nd
    dilations = kn.attr("dilations", None) or [1] * nd
    pads = kn.attr("pads", None) or [0] * (2 * nd)
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        return "strides/dilations/pads do not match kernel_shape"
    if min(kernel) < 1 or min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
        return "non-positive kernel/stride/dilation or negative pads"
    auto_pad = kn.attr("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return f"unknown auto_pad {auto_pad!r}"
    return None


def _sig(c: np.dtype[Any], n_int: int, low: bool) -> Any:
    extra = [types.int64] * n_int + ([from_dtype(c)] if low else [])
    return types.void(
        numba_array(c, 3, readonly=True, layout="C"),
        numba_array(c, 3, readonly=False, layout="C"),
        *extra,
    )


def _build_pool(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    is_max = kn.op_type == "MaxPool"
    redo_nan: SizedKernel | None = None
    if is_max:
        kern = ctx.jit(_max_pool, [_sig(c, 8, True)])
        low = c.type(np.iinfo(c).min if c.kind in "iu" else -np.inf)
        redo_nan = ctx.jit(_max_pool_nan, [_sig(c, 8, False)]) if c.kind == "f" else None
    else:
        kern = ctx.jit(_avg_pool, [_sig(c, 12, False)])
    include_pad = bool(kn.attr("count_include_pad", 0))
    kernel = [int(k) for k in kn.attr("kernel_shape")]
    nd = len(kernel)
    strides, dilations = spatial_attrs(kn, nd, kernel)
    ceil_mode = bool(kn.attr("ceil_mode", 0))
    name = kn.name
    absent = (None,) * (len(kn.node.outputs) - 1)  # an Indices output named "" (not requested)
    # 1-D pools are 2-D pools with H = 1
    k2 = ([1] if nd == 1 else []) + kernel
    s2 = ([1] if nd == 1 else []) + [int(s) for s in strides]
    d2 = ([1] if nd == 1 else []) + [int(d) for d in dilations]

    def run(x: Any) -> tuple[Any, ...]:
        if x.ndim != nd + 2:
            raise InvalidArgument(
                f"{name}: input must be {nd + 2}-D (N, C, spatial) for a {nd}-D kernel_shape, "
                f"got {x.shape}"
            )
        pb, pe, out = conv_geometry(kn, x.shape[2:], kernel, strides, dilations, ceil_mode)
        n, ch = x.shape[:2]
        sp = ((1,) if nd == 1 else ()) + tuple(x.shape[2:])
        pb2 = ([0] if nd == 1 else []) + list(pb)
        pe2 = ([0] if nd == 1 else []) + list(pe)
        out2 = ([1] if nd == 1 else []) + list(out)
        y = np.empty((n * ch, out2[0], out2[1]), c)
        if y.size:
            x3 = np.ascontiguousarray(x, dtype=c).reshape(n * ch, sp[0], sp[1])
            geo = (k2[0], k2[1], s2[0], s2[1], d2[0], d2[1], pb2[0], pb2[1])
            if is_max:
                kern(x3.size, x3, y, *geo, low)
                if redo_nan is not None and np.isnan(y.max()):  # max propagates NaN
                    redo_nan(y.size, x3, y, *geo)
            elif include_pad:
                kern(x3.size, x3, y, *geo, -pb2[0], sp[0] + pe2[0], -pb2[1], sp[1] + pe2[1])
            else:
                kern(x3.size, x3, y, *geo, 0, sp[0], 0, sp[1])
        res = y.reshape((n, ch, *out))
        return (res.astype(dt) if dt != c else res, *absent)

    return run


for _op in ("MaxPool", "AveragePool"):
    numba_kernel(_op, since=1, applies=_applies)(_build_pool)
