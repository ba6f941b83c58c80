"""MaxPool, AveragePool (1-D and 2-D), GlobalAveragePool and GlobalMaxPool.

MaxPool and AveragePool read each plane along a `window.Window` plan, as the depthwise Conv
does: a stride-1 pool whose output rows are as long as the input's is one loop over the whole
plane (a tap crossing a row edge is dropped by a select); other pools copy the plane once into
a buffer padded with the identity (-inf, the type's minimum, or 0) and split by stride phase,
then run one loop over all output rows (the values past each row's end computed and dropped)
and copy the rows out. The kernel text is generated per (op, kernel size, dtype) with the taps
unrolled for the common sizes (`depthwise.UNROLLED`; other sizes share one looped text per op
and dtype). AveragePool sums in float64 and multiplies by the reciprocal of each window's
count, planned with the window (per input shape): the taps inside the input, or
(count_include_pad) inside the explicitly padded input; taps that a ceil_mode window puts past
the end padding never count, as in the numpy kernel and onnxruntime. Window geometry (auto_pad,
pads, ceil_mode, dilations, output shape) comes from the CPU provider's
`conv_geometry`/`spatial_attrs`.

An AveragePool whose windows tile the input (stride = kernel, no padding, no dilation: CRNN's
(3, 2) average down to height 1) takes a shorter road, `_tile_pool`: per output row, the
window's input rows are summed elementwise into one float64 buffer (contiguous loops that
vectorize), then each run of `kw` columns is added. For CRNN's [384, 3, 80] that is 15 us
where the windowed kernel's strided float64 taps took 44 (onnxruntime: 7). The same road for
MaxPool measured slower than the windowed kernel (its NaN count is a second pass).

MaxPool treats NaN as the numpy kernel does (see `_max_pool` there: onnxruntime's
first-tap-then-strictly-greater rule): the unrolled max is Python's max, one vector instruction
that keeps or drops a NaN by its place, so the kernel also counts the input's NaNs, and a run
that has some redoes every window in `_max_pool_nan` (rare inputs pay, not the others).

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

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode
from turnout.semantics.geometry import conv_geometry, spatial_attrs

from .. import cache
from ..codegen import compute_dtype, numba_array
from ..registry import SERIAL_WORK, BuildContext, SizedKernel, numba_kernel
from .depthwise import UNROLLED
from .window import Window, copy_lines, geo_lines, plan_window, window_arg_types

__all__ = ["row_max"]

_CTOR = {
    "float32": "np.float32",
    "float64": "np.float64",
    "int8": "np.int8",
    "uint8": "np.uint8",
}

_HEAD = """\
def _pool(x, y, rc, offs, cols, lo, hi, geo, chunks, low_):
    T = {ctor}
    F = np.float64
    low = T(low_)
{geo}    planes = x.shape[0]
    nans = 0
{consts}    for ch in prange(chunks):
        buf = np.full(blen, low)
        acc = np.empty(0 if flat else rows * rstep, {acc})
        for q in range(ch * planes // chunks, (ch + 1) * planes // chunks):
            src = x[q]
            if not direct:
{copy}                src = buf
            yp = y[q]
{body}{count}    return nans
"""

# the NaNs of an input plane, counted after it is pooled (a loop of its own: a test inside the
# unrolled one would keep it from vectorizing)
_COUNT = """\
            xq = x[q]
            for k in range(xq.shape[0]):
                nans += xq[k] != xq[k]
"""


def _reduce(op: str, reads: list[str]) -> str:
    # the max is Python's max (a select LLVM turns into one vector max), which drops a NaN
    # depending on its place: a plane holding a NaN is redone by onnxruntime's rule
    if op == "max":
        return reads[0] if len(reads) == 1 else f"max({', '.join(reads)})"
    return " + ".join(f"F({r})" for r in reads)


def _unrolled(op: str, kh: int, kw: int) -> tuple[str, str]:
    taps = kh * kw
    consts = "".join(f"    lo{j} = lo[{j}]\n    hi{j} = hi[{j}]\n" for j in range(kw))
    consts += "".join(f"    o{t} = offs[{t}]\n" for t in range(taps))
    lines = ["            if flat:"]
    lines += [f"                r{ki} = src[o{ki * kw}:]" for ki in range(kh)]
    lines.append("                for j in range(rlen):")
    lines.append("                    cj = cols[j]")
    lines.append("                    v = low" if op == "max" else "                    v = F(0)")
    for kj in range(kw):
        s = _reduce(op, [f"r{ki}[j + {kj}]" for ki in range(kh)])
        lines.append(f"                    s = {s}")
        keep = "max(v, s)" if op == "max" else "v + s"
        lines.append(f"                    v = {keep} if cj >= lo{kj} and cj < hi{kj} else v")
    lines.append(
        "                    yp[j] = v"
        if op == "max"
        else "                    yp[j] = T(v * rc[j])"
    )
    s = _reduce(op, [f"t{t}[j]" for t in range(taps)])
    if kw <= 2:  # the input itself at column stride 2 (see plan_window's direct_stride2)
        s2 = _reduce(op, [f"r{ki}[2 * j + {kj}]" for ki in range(kh) for kj in range(kw)])
        lines.append("            elif direct and sw == 2:")
        lines.append("                for r in range(rows):")
        lines.append("                    base = r * rstep")
        lines += [f"                    r{ki} = src[base + o{ki * kw}:]" for ki in range(kh)]
        lines.append("                    yo = yp[r * rlen : r * rlen + rlen]")
        if op != "max":
            lines.append("                    ro = rc[r * rlen : r * rlen + rlen]")
        lines.append("                    for j in range(rlen):")
        lines.append(
            f"                        yo[j] = {s2}"
            if op == "max"
            else f"                        yo[j] = T(({s2}) * ro[j])"
        )
    lines.append("            elif rstep == wp:")
    lines += [f"                t{t} = src[o{t}:]" for t in range(taps)]
    lines.append("                for j in range((rows - 1) * rstep + rlen):")
    lines.append(f"                    acc[j] = {s}")
    lines.append("                for r in range(rows):")
    lines.append("                    ar = acc[r * rstep : r * rstep + rlen]")
    lines.append("                    yo = yp[r * rlen : r * rlen + rlen]")
    if op == "max":
        lines.append("                    for j in range(rlen):")
        lines.append("                        yo[j] = ar[j]")
    else:
        lines.append("                    ro = rc[r * rlen : r * rlen + rlen]")
        lines.append("                    for j in range(rlen):")
        lines.append("                        yo[j] = T(ar[j] * ro[j])")
    lines.append("            else:")
    lines.append("                for r in range(rows):")
    lines.append("                    base = r * rstep")
    lines += [f"                    t{t} = src[base + o{t}:]" for t in range(taps)]
    lines.append("                    yo = yp[r * rlen : r * rlen + rlen]")
    if op != "max":
        lines.append("                    ro = rc[r * rlen : r * rlen + rlen]")
    lines.append("                    for j in range(rlen):")
    lines.append(
        f"                        yo[j] = {s}"
        if op == "max"
        else f"                        yo[j] = T(({s}) * ro[j])"
    )
    return consts, "\n".join(lines) + "\n"


_GENERIC = """\
            racc = np.empty(rlen, {acc})
            for r in range(rows):
                base = r * rstep
                for j in range(rlen):
                    racc[j] = {init}
                for t in range(taps):
                    tt = src[base + offs[t]:]
                    if flat:
                        kj = t % kw
                        lt = lo[kj]
                        ht = hi[kj]
                        for j in range(rlen):
                            cj = cols[j]
                            racc[j] = {update} if cj >= lt and cj < ht else racc[j]
                    else:
                        for j in range(rlen):
                            racc[j] = {update}
                yo = yp[r * rlen : r * rlen + rlen]
                ro = rc[r * rlen : r * rlen + rlen]
                for j in range(rlen):
                    yo[j] = {final}
"""


def _source(op: str, kh: int, kw: int, dtype: np.dtype[Any]) -> str:
    if (kh, kw) in UNROLLED:
        consts, body = _unrolled(op, kh, kw)
    else:
        consts = "    taps = offs.shape[0]\n    kw = lo.shape[0]\n"
        if op == "max":
            body = _GENERIC.format(
                acc="x.dtype", init="low", update="max(racc[j], tt[j])", final="racc[j]"
            )
        else:
            body = _GENERIC.format(
                acc="np.float64",
                init="F(0)",
                update="racc[j] + F(tt[j])",
                final="T(racc[j] * ro[j])",
            )
    count = _COUNT if op == "max" and dtype.kind == "f" else ""
    return _HEAD.format(
        acc="np.float64" if op == "avg" else "x.dtype",
        ctor=_CTOR[dtype.name],
        geo=geo_lines(4),
        copy=copy_lines(16),
        consts=consts,
        body=body,
        count=count,
    )


_KERNELS: dict[tuple[Any, ...], SizedKernel] = {}


def _pool_kernel(
    op: str, kernel: tuple[int, int], dtype: np.dtype[Any], parallel: bool
) -> SizedKernel:
    """`k(work, x2, y2, rc, *window.args(), chunks, low) -> NaN outputs` for planes x2 (P, H*W)
    and y2 (P, OH*OW); `rc` holds the reciprocal window counts (average) or is a dummy."""
    kh, kw = kernel
    shape = (kh, kw) if (kh, kw) in UNROLLED else (0, 0)
    key = (op, shape, dtype.name, parallel)
    kern = _KERNELS.get(key)
    if kern is None:
        fn = cache.load_source(_source(op, kh, kw, dtype), "pool")._pool
        sig = types.int64(
            numba_array(dtype, 2, readonly=True, layout="C"),
            numba_array(dtype, 2, readonly=False, layout="C"),
            numba_array(np.dtype(np.float64), 1, readonly=True, layout="C"),
            *window_arg_types(),
            types.int64,
            types.float64,
        )
        kern = _KERNELS[key] = SizedKernel(fn, [sig], parallel)
    cache.note_used(kern.serial, kern.parallel)  # memoized: the session still uses it
    return kern


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
    """A run at one input shape: its window plan, output shapes and average divisors."""

    chunks: int
    final: tuple[int, ...]
    nan_geo: tuple[int, ...]
    planes: int
    rc: Any
    shape2: tuple[Any, Any]
    win: Window | None
    work: int
    tile: bool  # the windows tile the input: `_tile_pool`


def _build_pool(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    is_max = kn.op_type == "MaxPool"
    kernel = [int(k) for k in kn.attr("kernel_shape")]
    nd = len(kernel)
    k2 = (1, kernel[0]) if nd == 1 else (kernel[0], kernel[1])
    kern = _pool_kernel("max" if is_max else "avg", k2, c, ctx.parallel)
    tile_kern = None if is_max else ctx.jit(_tile_pool, [_tile_sig(c)])
    redo_nan: SizedKernel | None = None
    if is_max:
        low = float(np.iinfo(c).min) if c.kind in "iu" else -np.inf
        if c.kind == "f":
            redo_nan = ctx.jit(_max_pool_nan, [_nan_sig(c)])
    else:
        low = 0.0
    include_pad = bool(kn.attr("count_include_pad", 0))
    strides, dilations = spatial_attrs(kn, nd, kernel)
    ceil_mode = bool(kn.attr("ceil_mode", 0))
    name = kn.name
    absent = (None,) * (len(kn.node.outputs) - 1)  # an Indices output named "" (not requested)
    s2 = ([1] if nd == 1 else []) + [int(s) for s in strides]
    d2 = ([1] if nd == 1 else []) + [int(d) for d in dilations]
    plans: dict[tuple[int, ...], _Plan] = {}
    dummy = np.zeros(1, np.float64)

    def plan(shape: tuple[int, ...]) -> _Plan:
        pb, pe, out = conv_geometry(kn, shape[2:], kernel, strides, dilations, ceil_mode)
        n, ch = shape[:2]
        sp = ((1,) if nd == 1 else ()) + tuple(shape[2:])
        pb2 = ([0] if nd == 1 else []) + list(pb)
        pe2 = ([0] if nd == 1 else []) + list(pe)
        out2 = ([1] if nd == 1 else []) + list(out)
        win: Window | None = None
        rc = dummy
        if out2[0] * out2[1] > 0 and n * ch > 0:
            win = plan_window(
                (sp[0], sp[1]),
                k2,
                (s2[0], s2[1]),
                (d2[0], d2[1]),
                (pb2[0], pb2[1]),
                (out2[0], out2[1]),
                direct_stride2=k2[1] <= 2 and k2 in UNROLLED,
            )
            if not is_max:
                ext = [(-pb2[a], sp[a] + pe2[a]) if include_pad else (0, sp[a]) for a in (0, 1)]
                cnt = [_counts(out2[a], s2[a], d2[a], k2[a], pb2[a], *ext[a]) for a in (0, 1)]
                total = np.outer(cnt[0], cnt[1]).reshape(-1).astype(np.float64)
                with np.errstate(divide="ignore"):
                    rc = np.ascontiguousarray(1.0 / total)
        planes = n * ch
        work = planes * out2[0] * out2[1] * k2[0] * k2[1]
        chunks = min(planes, 64) if ctx.parallel and work >= SERIAL_WORK else 1
        nan_geo = (k2[0], k2[1], s2[0], s2[1], d2[0], d2[1], pb2[0], pb2[1])
        tile = tile_kern is not None and win is not None
        tile = tile and _tiles((sp, out2), k2, s2, d2, pb2, pe2)
        if tile:
            work = planes * out2[0] * k2[0] * sp[1]
            chunks = min(planes, 64) if ctx.parallel and work >= SERIAL_WORK else 1
        return _Plan(
            chunks=max(chunks, 1),
            final=(n, ch, *out),
            nan_geo=nan_geo,
            planes=planes,
            rc=rc,
            shape2=(sp, out2),
            win=win,
            work=work,
            tile=tile,
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
        sp, out2 = p.shape2
        y = np.empty((p.planes, out2[0] * out2[1]), c)
        if y.size and p.win is not None:
            x2 = np.ascontiguousarray(x, dtype=c).reshape(p.planes, sp[0] * sp[1])
            if p.tile and tile_kern is not None:
                x3 = x2.reshape(p.planes, sp[0], sp[1])
                y3 = y.reshape(p.planes, out2[0], out2[1])
                tile_kern(p.work, x3, y3, k2[0], k2[1], 1.0 / (k2[0] * k2[1]), p.chunks)
                nans = 0
            else:
                nans = kern(p.work, x2, y, p.rc, *p.win.args(), p.chunks, low)
            if nans and redo_nan is not None:  # every window again, by onnxruntime's rule
                y.fill(np.nan)
                redo_nan(
                    y.size,
                    x2.reshape(p.planes, sp[0], sp[1]),
                    y.reshape(p.planes, out2[0], out2[1]),
                    *p.nan_geo,
                )
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
    # np.max's answer, NaN.
    planes, n = x.shape
    for p in prange(planes):
        xr = x[p]
        m = ~mag
        a = mag & 0
        for k in range(n):
            v = xr[k]
            key = v ^ mag if v < 0 else v
            m = key if key > m else m
            av = v & mag
            a = av if av > a else a
        y[p] = nan if a > inf else (m ^ mag if m < 0 else m)


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
