"""MaxPool, AveragePool (1-D and 2-D), GlobalAveragePool and GlobalMaxPool.

MaxPool and AveragePool run on `pool_rows`' kernels, which read the input itself (no padded
or phase-split copy of each plane, which cost more than the pooling at conv nets' 3x3 stride-2
shapes): per output row, the window's rows inside the input are reduced into a row buffer
with the padding's identity at both ends, then the columns are reduced at the stride
(`max_rows`, `avg_rows`); stride-1 'same' pools (`max_flat`, `avg_flat`) and MaxPool on
narrow planes (`max_plane`, see `plane_fits`) do each pass as one loop over the plane and
redo the edge columns.
AveragePool sums in float64 and multiplies by the reciprocal of each window's count, planned
per input shape: the taps inside the input, or (count_include_pad) inside the explicitly
padded input; taps that a ceil_mode window puts past the end padding never count, as in the
numpy kernel and onnxruntime. Window geometry (auto_pad, pads, ceil_mode, dilations, output
shape) comes from the CPU provider's `conv_geometry`/`spatial_attrs`.

An AveragePool whose windows tile the input (stride = kernel, no padding, no dilation: CRNN's
(3, 2) average down to height 1) takes a shorter road, `_tile_pool`: per output row, the
window's input rows are summed elementwise into one float64 buffer (contiguous loops that
vectorize), then each run of `kw` columns is added. For CRNN's [384, 3, 80] that is 15 us
where the windowed kernel's strided float64 taps took 44 (onnxruntime: 7; these numbers are
from before `pool_rows`, which left this road as it was). The same road for MaxPool measured
slower than the windowed kernel (its NaN count is a second pass). An AveragePool whose one
window holds the whole plane (`_whole`: the 7x7 before a classifier) is GlobalAveragePool's
matrix-vector product, with the window's reciprocal count as the weights.

MaxPool treats NaN as the numpy kernel does (see `_max_pool` there: onnxruntime's
first-tap-then-strictly-greater rule): the kernels' max is Python's max, one vector instruction
that keeps or drops a NaN by its place, so they also report the planes holding a NaN, and a
run that has some redoes every window in `_max_pool_nan` (rare inputs pay, not the others).

GlobalAveragePool is one BLAS matrix-vector product (planes x spatial times 1/spatial): a sum
in numba's loops cannot be vectorized without reordering it. GlobalMaxPool runs on the float's
bits (see `_global_max`) and propagates NaN as the numpy kernel's `np.max` does.

MaxPool with an Indices output and 3-D windowed pools run on the numpy kernel (declined here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import from_dtype, prange, types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.geometry import conv_geometry, spatial_attrs

from ..codegen import compute_dtype, numba_array
from ..registry import SERIAL_WORK, BuildContext, SizedKernel, numba_kernel
from .pool_rows import (
    avg_flat,
    avg_rows,
    flat_geometry,
    flat_sig,
    geometry,
    max_flat,
    max_plane,
    max_rows,
    plane_fits,
    plane_geometry,
    rows_sig,
)

__all__ = ["row_max"]


def _tile_pool(  # pragma: no cover - compiled by numba
    x: Any, y: Any, kh: int, kw: int, scale: float, chunks: int
) -> None:
    """y[p, o, j] = scale * the sum of x[p, o*kh:(o+1)*kh, j*kw:(j+1)*kw], accumulated in
    float64 as the windowed kernel does."""
    planes, oh_n, ow_n = y.shape
    n = ow_n * kw
    for ch in prange(chunks):
        sm = np.empty(n, np.float64)
        for p in range(ch * planes // chunks, (ch + 1) * planes // chunks):
            for o in range(oh_n):
                yr = y[p, o]
                r = x[p, o * kh]
                for w in range(n):
                    sm[w] = np.float64(r[w])
                for i in range(1, kh):
                    r = x[p, o * kh + i]
                    for w in range(n):
                        sm[w] += np.float64(r[w])
                if kw == 2:  # the common width: a pair sum LLVM vectorizes
                    for j in range(ow_n):
                        yr[j] = (sm[2 * j] + sm[2 * j + 1]) * scale
                else:
                    for j in range(ow_n):
                        a = sm[j * kw]
                        for t in range(1, kw):
                            a += sm[j * kw + t]
                        yr[j] = a * scale


def _tile_sig(c: np.dtype[Any]) -> Any:
    return types.void(
        numba_array(c, 3, readonly=True, layout="C"),
        numba_array(c, 3, readonly=False, layout="C"),
        types.int64,
        types.int64,
        types.float64,
        types.int64,
    )


def _tiles(shape2: tuple[Any, Any], k2: Any, s2: Any, d2: Any, pb2: Any, pe2: Any) -> bool:
    """Whether the windows tile the input: stride = kernel, no dilation, no padding, every
    window inside (the rows and columns past the last window are never read)."""
    sp, out2 = shape2
    return all(
        s2[a] == k2[a] and d2[a] == 1 and pb2[a] == 0 and pe2[a] == 0
        and out2[a] * k2[a] <= sp[a]
        for a in (0, 1)
    )  # fmt: skip


def _whole(sp: Any, out2: Any, k2: Any, d2: Any, pb2: Any) -> bool:
    """Whether the output is one window holding every input position (undilated, its rows
    and columns from the top-left padding past the input's end): shufflenet's and inception's
    7x7 AveragePool before the classifier."""
    return all(
        out2[a] == 1 and d2[a] == 1 and k2[a] - pb2[a] >= sp[a] for a in (0, 1)
    )  # fmt: skip


def _max_pool_nan(
    x: Any, y: Any, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, ph: int, pw: int
) -> None:  # pragma: no cover - compiled by numba
    # The outputs set to NaN, by onnxruntime's rule as the numpy kernel: the first tap inside
    # the input, then only strictly greater values (NaN compares false); a window with no tap
    # inside the input gives -inf, as the max over its padding. A kernel of its own, run only
    # when the input has a NaN: inside the max kernel it slowed every run.
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
                y[p, oh, ow] = m if seen else -np.inf


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


def _counts(n_out: int, stride: int, dil: int, k: int, pad: int, lo: int, hi: int) -> Any:
    """Per output position along one axis: the taps inside [lo, hi) (input coordinates)."""
    start = np.arange(n_out) * stride - pad
    taps = start[:, None] + np.arange(k)[None, :] * dil
    return ((taps >= lo) & (taps < hi)).sum(axis=1)


@dataclass(frozen=True)
class _Plan:
    """A run at one input shape: the kernel's geometry, output shapes and average divisors."""

    chunks: int
    final: tuple[int, ...]
    geo: Any  # pool_rows.geometry(), None when there is nothing to compute
    nan_geo: tuple[int, ...]
    rc: Any
    shape3: tuple[int, ...]  # (planes, H, W)
    out3: tuple[int, ...]  # (planes, OH, OW)
    work: int
    tile: bool  # the windows tile the input: `_tile_pool`
    whole: Any  # AveragePool's one window holding the whole plane: the GEMV's weights
    flat: Any  # the kernel taking flattened planes (`max_flat`, `avg_flat`, `max_plane`)


def _build_pool(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    is_max = kn.op_type == "MaxPool"
    kernel = [int(k) for k in kn.attr("kernel_shape")]
    nd = len(kernel)
    k2 = (1, kernel[0]) if nd == 1 else (kernel[0], kernel[1])
    kern = ctx.jit(max_rows if is_max else avg_rows, [rows_sig(c, is_max)])
    strides, dilations = spatial_attrs(kn, nd, kernel)
    s2 = ([1] if nd == 1 else []) + [int(s) for s in strides]
    d2 = ([1] if nd == 1 else []) + [int(d) for d in dilations]
    flat_kern = None  # stride 1, columns undilated: 'same' pooling runs flat
    if s2 == [1, 1] and d2[1] == 1:
        flat_kern = ctx.jit(max_flat if is_max else avg_flat, [flat_sig(c, is_max)])
    plane_kern = ctx.jit(max_plane, [flat_sig(c, True)]) if is_max else None
    tile_kern = None if is_max else ctx.jit(_tile_pool, [_tile_sig(c)])
    redo_nan: SizedKernel | None = None
    if is_max:
        low = float(np.iinfo(c).min) if c.kind in "iu" else -np.inf
        if c.kind == "f":
            redo_nan = ctx.jit(_max_pool_nan, [_nan_sig(c)])
    else:
        low = 0.0
    lowa = np.full(1, low, c)
    include_pad = bool(kn.attr("count_include_pad", 0))
    ceil_mode = bool(kn.attr("ceil_mode", 0))
    name = kn.name
    absent = (None,) * (len(kn.node.outputs) - 1)  # an Indices output named "" (not requested)
    plans: dict[tuple[int, ...], _Plan] = {}
    dummy = np.zeros((1, 1), np.float64)

    def plan(shape: tuple[int, ...]) -> _Plan:
        pb, pe, out = conv_geometry(kn, shape[2:], kernel, strides, dilations, ceil_mode)
        n, ch = shape[:2]
        planes = n * ch
        sp = ((1,) if nd == 1 else ()) + tuple(shape[2:])
        pb2 = ([0] if nd == 1 else []) + list(pb)
        pe2 = ([0] if nd == 1 else []) + list(pe)
        out2 = ([1] if nd == 1 else []) + list(out)
        geo = None
        rc: Any = dummy
        if out2[0] * out2[1] > 0 and planes > 0:
            geo = geometry(
                (sp[0], sp[1]),
                k2,
                (s2[0], s2[1]),
                (d2[0], d2[1]),
                (pb2[0], pb2[1]),
                (out2[0], out2[1]),
            )
            if not is_max:
                ext = [(-pb2[a], sp[a] + pe2[a]) if include_pad else (0, sp[a]) for a in (0, 1)]
                cnt = [_counts(out2[a], s2[a], d2[a], k2[a], pb2[a], *ext[a]) for a in (0, 1)]
                total = np.outer(cnt[0], cnt[1]).astype(np.float64)
                with np.errstate(divide="ignore"):
                    rc = np.ascontiguousarray(1.0 / total)
        # elements read and written, roughly: each input row once per window holding it
        work = planes * out2[0] * (k2[0] * sp[1] + k2[1] * out2[1])
        tile = tile_kern is not None and geo is not None
        tile = tile and _tiles((sp, out2), k2, s2, d2, pb2, pe2)
        whole = None
        if not is_max and geo is not None and _whole(sp, out2, k2, d2, pb2):
            whole = np.full(sp[0] * sp[1], rc[0, 0], c)
        if tile:
            work = planes * out2[0] * k2[0] * sp[1]
        chunks = min(planes, 64) if ctx.parallel and work >= SERIAL_WORK else 1
        flat: Any = None
        if geo is not None and not tile and flat_kern is not None and out2[1] == sp[1]:
            flat = flat_kern
            geo = flat_geometry(geo, sp[0], k2[0], pb2[0])
            rc = rc.reshape(-1)
        elif geo is not None and plane_kern and plane_fits(sp[1], (s2[0], s2[1]), out2[1]):
            flat = plane_kern
            geo = plane_geometry(geo, sp[0], sp[1], k2[0], s2[0], pb2[0], out2[1])
        return _Plan(
            chunks=max(chunks, 1),
            final=(n, ch, *out),
            geo=geo,
            nan_geo=(k2[0], k2[1], s2[0], s2[1], d2[0], d2[1], pb2[0], pb2[1]),
            rc=rc,
            shape3=(planes, sp[0], sp[1]),
            out3=(planes, out2[0], out2[1]),
            work=work,
            tile=tile,
            whole=whole,
            flat=flat,
        )

    def run(x: Any) -> tuple[Any, ...]:
        if x.ndim != nd + 2:
            raise InvalidArgument(
                f"{name}: input must be {nd + 2}-D (N, C, spatial) for a {nd}-D kernel_shape, "
                f"got {x.shape}"
            )
        p = plans.get(x.shape)
        if p is None:  # pads/auto_pad/output size: the same for every run at this shape
            p = plans[x.shape] = plan(x.shape)
        y = np.empty(p.out3, c)
        nans = 0
        if p.geo is not None:
            x3 = np.ascontiguousarray(x, dtype=c).reshape(p.shape3)
            if p.whole is not None:  # GlobalAveragePool's road (see `_build_global`)
                np.matmul(x3.reshape(p.shape3[0], -1), p.whole, out=y.reshape(-1))
            elif p.tile and tile_kern is not None:
                k = k2[0] * k2[1]
                tile_kern(p.work, x3, y, k2[0], k2[1], 1.0 / k, p.chunks)
            elif p.flat is not None:
                x2 = x3.reshape(p.shape3[0], -1)
                y2 = y.reshape(p.out3[0], -1)
                if is_max:
                    nans = p.flat(p.work, x2, y2, p.geo, p.chunks, lowa)
                else:
                    p.flat(p.work, x2, y2, p.geo, p.chunks, p.rc)
            elif not is_max:
                kern(p.work, x3, y, p.geo, p.chunks, p.rc)
            else:
                nans = kern(p.work, x3, y, p.geo, p.chunks, lowa)
            if nans and redo_nan is not None:
                y.fill(np.nan)  # every window again, by onnxruntime's rule
                redo_nan(y.size, x3, y, *p.nan_geo)
        res = y.reshape(p.final)
        return (res.astype(dt) if dt != c else res, *absent)

    return run


def _nan_sig(c: np.dtype[Any]) -> Any:
    return types.void(
        numba_array(c, 3, readonly=True, layout="C"),
        numba_array(c, 3, readonly=False, layout="C"),
        *[types.int64] * 8,
    )


for _op in ("MaxPool", "AveragePool"):
    numba_kernel(_op, since=1, applies=_applies)(_build_pool)


# ------------------------------------------------------------------------------------------
# global pools


def _global_max(x: Any, y: Any, mag: Any, inf: Any, nan: Any) -> None:  # pragma: no cover
    # On the float's bits as integers (x, y are int views): the key (v ^ mag if v < 0 else v)
    # orders like the floats, so the max is an integer max, which LLVM vectorizes (a float max
    # that keeps NaN does not). A NaN of either sign shows as a magnitude above inf's: then
    # np.max's answer, NaN. numba computes int32 bitwise operations in 64 bits: the casts back
    # to the element type (T) keep float32's loop on 32-bit lanes, eight to an AVX2 vector
    # instead of four (a text CNN's 100 x 126 max over time: 6.8 -> 2.7 us).
    T = x.dtype.type
    zero = T(0)
    planes, n = x.shape
    for p in prange(planes):
        xr = x[p]
        m = T(~mag)
        a = zero
        for k in range(n):
            v = xr[k]
            key = T(v ^ mag) if v < zero else v
            m = key if key > m else m
            av = T(v & mag)
            a = av if av > a else a
        y[p] = nan if a > inf else (T(m ^ mag) if m < zero else m)


def _global_applies(kn: KernelNode) -> str | None:
    x = kn.inputs[0]
    if x is None or x.elem_type is None:
        return "input types unknown at session creation"
    c = compute_dtype(x.dtype)
    if c is None or c.name not in ("float32", "float64"):
        return f"{kn.op_type} on {x.dtype} is not compiled by numba"
    if x.shape is not None and len(x.shape) < 3:
        return f"input rank {len(x.shape)}: needs (N, C, spatial...)"
    return None


_BITS = {
    "float32": (np.int32, 0x7FFFFFFF, 0x7F800000, 0x7FC00000),
    "float64": (np.int64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000, 0x7FF8000000000000),
}


def row_max(c: np.dtype[Any], ctx: BuildContext) -> Callable[[Any, Any], None]:
    """`f(x2, y)`: y[p] = the max of row p of the C-contiguous float32/float64 matrix x2,
    NaN when the row holds one (np.max's answer), by `_global_max` on the bits. Shared by
    GlobalMaxPool and ReduceMax over trailing axes (text CNNs' max over time)."""
    it, *bits = _BITS[c.name]
    consts = [it(b) for b in bits]
    ai = np.dtype(it)
    sig = types.void(
        numba_array(ai, 2, readonly=True, layout="C"),
        numba_array(ai, 1, readonly=False, layout="C"),
        *[from_dtype(ai)] * 3,
    )
    kern = ctx.jit(_global_max, [sig])

    def run(x2: Any, y: Any) -> None:
        kern(x2.size, x2.view(ai), y.view(ai), *consts)

    return run


def _build_global(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    name = kn.name
    is_max = kn.op_type == "GlobalMaxPool"
    if is_max:
        rmax = row_max(c, ctx)
    weights: dict[int, Any] = {}  # spatial size -> its 1/size vector (average: one BLAS GEMV)

    def run(x: Any) -> tuple[Any]:
        if x.ndim < 3:
            raise InvalidArgument(
                f"{name}: input must be at least 3-D (N, C, spatial...), got {x.shape}"
            )
        planes = x.shape[0] * x.shape[1]
        shape = (*x.shape[:2], *([1] * (x.ndim - 2)))
        if planes == 0:
            return (np.empty(shape, dt),)
        if x.size == 0:  # empty windows, as the numpy kernel: a mean is NaN, a max has none
            if is_max:
                raise InvalidArgument(f"{name}: GlobalMaxPool of an empty spatial extent")
            return (np.full(shape, np.nan, dt),)
        x2 = np.ascontiguousarray(x, dtype=c).reshape(planes, -1)
        y = np.empty(planes, c)
        if is_max:
            rmax(x2, y)
        else:
            n = x2.shape[1]
            inv = weights.get(n)
            if inv is None:
                inv = weights[n] = np.full(n, 1.0 / n, c)
            np.matmul(x2, inv, out=y)
        y = y.reshape(shape)
        return (y.astype(dt) if dt != c else y,)

    return run


for _op in ("GlobalAveragePool", "GlobalMaxPool"):
    numba_kernel(_op, since=1, applies=_global_applies)(_build_global)
