"""Softmax, LogSoftmax and LayerNormalization: row kernels, one pass to reduce and one to write.

Softmax works on a (pre, n, post) view of its axis (flattened to 2-D before opset 13, as the
spec says), in the compute dtype (float32 sums its exps in float32, as onnxruntime does);
LayerNormalization on (rows, normalized size) with scale/bias broadcast once to the normalized
shape, its statistics accumulated in float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.shape import cut_axis, norm_axis

from .. import cache
from ..codegen import compute_dtype, numba_array
from ..registry import (
    SERIAL_WORK,
    BuildContext,
    SizedKernel,
    float_inputs_applies,
    numba_kernel,
)
from ..vecmath import contracts, exp_f32

__all__: list[str] = []


# Softmax over a (pre, n, post) view. The kernel text is generated per (dtype, log): float32
# computes exp with vecmath's vectorizing float32 exp (within 1 ulp), float64 with np.exp.
# Per row: a max pass, an exp pass writing exp(x - max) into the output, a sum pass, and a
# scale pass (Softmax: divide by the sum; LogSoftmax: x - max - log(sum)). Every pass is a loop
# LLVM vectorizes: the max runs on the float's bits as integers (see pool's `_global_max`: a
# float max reduction is not vectorized), the sum in `_LANES` partial sums, elementwise over
# blocks of the row (one running float sum cannot be reordered). A NaN in a row makes its exp
# NaN whatever the max did with it, so the sum and then every output of the row are NaN, as in
# onnxruntime and onnx.reference; a +inf gives inf - inf = NaN the same way, and a row of -inf
# gives NaN everywhere. The cols kernel (axis not last) runs the same passes on `post`-long
# vectors of running maxima and sums.
_LANES = 32

_SOFTMAX_ROWS = """\
def _softmax_rows(x, xi, out, chunks, lanes):
    T = {ctor}
    I = {ictor}
    mag = I({mag})  # every bit but the sign
    rows, n = x.shape
    nb = n // lanes
    for ch in prange(chunks):
        acc = np.empty(lanes, T)
        for i in range(ch * rows // chunks, (ch + 1) * rows // chunks):
            xr = x[i]
            ir = xi[i]
            yr = out[i]
            km = ~mag
            for j in range(n):
                v = ir[j]
                key = v ^ mag if v < 0 else v
                km = key if key > km else km
            m = I(km ^ mag if km < 0 else km).view(T)
            for k in range(lanes):
                acc[k] = 0
            for b in range(nb + 1):  # blocks of `lanes`, then the rest of the row
                j0 = b * lanes
                xb = xr[j0:]
                yb = yr[j0:]
                for k in range(min(lanes, n - j0)):
                    d = xb[k] - m
{exp}
                    yb[k] = e
                    acc[k] += e
            w = lanes  # a power of two: fold the partial sums pairwise (no serial chain)
            while w > 1:
                w //= 2
                for k in range(w):
                    acc[k] += acc[k + w]
            s = acc[0]
{scale_rows}
"""

_SOFTMAX_COLS = """\
def _softmax_cols(x, out, chunks):
    T = {ctor}
    pre, n, post = x.shape
    for ch in prange(chunks):
        m = np.empty(post, T)
        s = np.empty(post, T)
        for i in range(ch * pre // chunks, (ch + 1) * pre // chunks):
            xi = x[i]
            yi = out[i]
            for p in range(post):
                m[p] = -np.inf
                s[p] = 0
            for r in range(n):
                xr = xi[r]
                for p in range(post):
                    v = xr[p]
                    m[p] = v if v > m[p] else m[p]
            for r in range(n):
                xr = xi[r]
                yr = yi[r]
                for p in range(post):
                    d = xr[p] - m[p]
{exp_cols}
                    yr[p] = e
                    s[p] += e
{scale_cols}
"""

_SCALE = {
    (False, "rows"): """\
            r = T(1) / s
            for j in range(n):
                yr[j] = yr[j] * r""",
    (True, "rows"): """\
            ls = T(np.log(s))
            for j in range(n):
                yr[j] = (xr[j] - m) - ls""",
    (False, "cols"): """\
            for r in range(n):
                yr = yi[r]
                for p in range(post):
                    yr[p] = yr[p] / s[p]""",
    (True, "cols"): """\
            for p in range(post):
                s[p] = np.log(s[p])
            for r in range(n):
                xr = xi[r]
                yr = yi[r]
                for p in range(post):
                    yr[p] = (xr[p] - m[p]) - s[p]""",
}


def _softmax_source(c: np.dtype[Any], log: bool, cols: bool) -> str:
    """The text of `_softmax_cols` (over the middle axis of (pre, n, post)) or of
    `_softmax_rows` (over the last axis of (rows, n))."""
    exp = exp_f32("d", "e") if c == np.float32 else ["e = np.exp(d)"]
    ctor = f"np.{c.name}"
    if cols:
        return _SOFTMAX_COLS.format(
            ctor=ctor,
            exp_cols="\n".join(f"{' ' * 20}{ln}" for ln in exp),
            scale_cols=_SCALE[(log, "cols")],
        )
    bits = c.itemsize * 8 - 1
    return _SOFTMAX_ROWS.format(
        ctor=ctor,
        ictor=f"np.int{bits + 1}",
        mag=hex((1 << bits) - 1),
        exp="\n".join(f"{' ' * 20}{ln}" for ln in exp),
        scale_rows=_SCALE[(log, "rows")],
    )


def _softmax_kernel(c: np.dtype[Any], log: bool, cols: bool, ctx: BuildContext) -> SizedKernel:
    """The rows kernel (softmax over the last axis of a (rows, n) view) or the cols kernel
    (over the middle axis of (pre, n, post)), compiled for this session (memoized)."""
    source = _softmax_source(c, log, cols)
    mod = cache.load_source(source, "softmax")
    fma = contracts(source)
    if cols:
        sig = types.void(
            numba_array(c, 3, readonly=True, layout="C"),
            numba_array(c, 3, readonly=False, layout="C"),
            types.int64,
        )
        return ctx.jit(mod._softmax_cols, [sig], contract=fma)
    sig = types.void(
        numba_array(c, 2, readonly=True, layout="C"),
        numba_array(np.dtype(f"int{c.itemsize * 8}"), 2, readonly=True, layout="C"),
        numba_array(c, 2, readonly=False, layout="C"),
        types.int64,
        types.int64,
    )
    return ctx.jit(mod._softmax_rows, [sig], contract=fma)


def _build_softmax(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    log = kn.op_type == "LogSoftmax"
    flatten = kn.since_version < 13
    axis0 = int(kn.attr("axis", 1 if flatten else -1))
    name = kn.name
    shape0 = kn.inputs[0].shape
    kerns: dict[bool, SizedKernel] = {}
    ints = np.dtype(f"int{c.itemsize * 8}")  # the rows kernel's max reads the float's bits
    # (shape) -> (view shape, chunks, cols): the arithmetic once per input shape
    plans: dict[tuple[int, ...], tuple[tuple[int, ...], int, bool]] = {}

    def kernel(cols: bool) -> SizedKernel:
        k = kerns.get(cols)
        if k is None:
            k = kerns[cols] = _softmax_kernel(c, log, cols, ctx)
        return k

    if shape0 is not None:  # the static rank says which kernel runs: compile it now
        nd0 = len(shape0)
        last = flatten or axis0 in (-1, nd0 - 1) or nd0 == 0
        kernel(not last)

    def plan(shape: tuple[int, ...]) -> tuple[tuple[int, ...], int, bool]:
        nd = len(shape)
        axis = cut_axis(name, axis0, nd) if flatten else norm_axis(name, axis0, nd, scalar=True)
        pre = math.prod(shape[:axis])
        if flatten:
            n, post = math.prod(shape[axis:]), 1
        else:
            n, post = (shape[axis] if nd else 1), math.prod(shape[axis + 1 :])
        size = pre * n * post
        chunks = min(pre, 64) if ctx.parallel and size >= SERIAL_WORK else 1
        view = (pre, n) if post == 1 else (pre, n, post)
        return view, max(chunks, 1), post != 1

    def run(x: Any) -> tuple[Any, ...]:
        p = plans.get(x.shape)
        if p is None:
            p = plans[x.shape] = plan(x.shape)
        view, chunks, cols = p
        if x.size == 0:
            return (np.empty(x.shape, dt),)
        xv = np.ascontiguousarray(x, dtype=c).reshape(view)
        out = np.empty(view, c)
        if cols:
            kernel(True)(x.size, xv, out, chunks)
        else:
            kernel(False)(x.size, xv, xv.view(ints), out, chunks, _LANES)
        res = out.reshape(x.shape)
        return (res.astype(dt) if dt != c else res,)

    return run


for _op in ("Softmax", "LogSoftmax"):
    numba_kernel(_op, since=1, applies=float_inputs_applies)(_build_softmax)


def _layer_norm(
    x: Any, scale: Any, bias: Any, eps: float, y: Any, mean: Any, inv: Any
) -> None:  # pragma: no cover - compiled by numba
    rows, n = x.shape
    for i in prange(rows):
        s = 0.0
        for j in range(n):
            s += x[i, j]
        mu = s / n
        q = 0.0
        for j in range(n):
            d = x[i, j] - mu
            q += d * d
        r = 1.0 / np.sqrt(q / n + eps)
        for j in range(n):
            y[i, j] = (x[i, j] - mu) * r * scale[j] + bias[j]
        mean[i] = mu
        inv[i] = r


def _ln_applies(kn: KernelNode) -> str | None:
    why = float_inputs_applies(kn)
    if why:
        return why
    for i, info in enumerate(kn.inputs[1:3], 1):
        if info is not None and (info.elem_type is None or compute_dtype(info.dtype) is None):
            return f"type of input {i} unknown at session creation"
    return None


def _build_layer_norm(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    outs = kn.outputs
    stat_dt = np.dtype(np.float32)
    for o in outs[1:]:
        if o is not None and o.dtype is not None:
            stat_dt = o.dtype
    sc = compute_dtype(stat_dt) or np.dtype(np.float32)
    sig = types.void(
        numba_array(c, 2, readonly=True, layout="C"),
        numba_array(c, 1, readonly=True, layout="C"),
        numba_array(c, 1, readonly=True, layout="C"),
        types.float64,
        numba_array(c, 2, readonly=False, layout="C"),
        numba_array(sc, 1, readonly=False, layout="C"),
        numba_array(sc, 1, readonly=False, layout="C"),
    )
    kern = ctx.jit(_layer_norm, [sig])
    axis0 = int(kn.attr("axis", -1))
    eps = float(kn.attr("epsilon", 1e-5))
    name = kn.name
    n_out = len(kn.node.outputs)

    def run(x: Any, scale: Any, bias: Any = None) -> tuple[Any, ...]:
        nd = x.ndim
        axis = norm_axis(name, axis0, nd, scalar=True)
        norm_shape = x.shape[axis:]
        try:
            s = np.broadcast_to(scale, norm_shape)
            b = np.broadcast_to(bias, norm_shape) if bias is not None else None
        except ValueError:
            raise InvalidArgument(
                f"{name}: scale/bias shapes do not broadcast to {norm_shape}"
            ) from None
        rows = int(np.prod(x.shape[:axis]))
        n = int(np.prod(norm_shape))
        x2 = np.ascontiguousarray(x, dtype=c).reshape(rows, n)
        s1 = np.ascontiguousarray(s, dtype=c).reshape(n)
        b1 = np.zeros(n, c) if b is None else np.ascontiguousarray(b, dtype=c).reshape(n)
        y = np.empty((rows, n), c)
        mean = np.empty(rows, sc)
        inv = np.empty(rows, sc)
        if rows and n:
            kern(x2.size * 3, x2, s1, b1, eps, y, mean, inv)
        stat_shape = x.shape[:axis] + (1,) * (nd - axis)
        yy = y.reshape(x.shape)
        res = (
            yy.astype(dt) if dt != c else yy,
            mean.reshape(stat_shape).astype(stat_dt, copy=False),
            inv.reshape(stat_shape).astype(stat_dt, copy=False),
        )
        return res[:n_out]

    return run


numba_kernel("LayerNormalization", since=17, applies=_ln_applies)(_build_layer_norm)


def _skip_layer_norm(
    x: Any,
    skip: Any,
    bias: Any,
    gamma: Any,
    beta: Any,
    eps: float,
    y: Any,
    total: Any,
    mean: Any,
    inv: Any,
) -> None:  # pragma: no cover - compiled by numba
    # total = x + skip + bias in the tensor's dtype (as the unfused Adds round), then
    # LayerNormalization of it over each row with float64 statistics
    rows, n = x.shape
    for i in prange(rows):
        xr = x[i]
        sr = skip[i]
        tr = total[i]
        s = 0.0
        for j in range(n):
            v = xr[j] + sr[j] + bias[j]
            tr[j] = v
            s += v
        mu = s / n
        q = 0.0
        for j in range(n):
            d = tr[j] - mu
            q += d * d
        r = 1.0 / np.sqrt(q / n + eps)
        yr = y[i]
        for j in range(n):
            yr[j] = (tr[j] - mu) * r * gamma[j] + beta[j]
        mean[i] = mu
        inv[i] = r


def _skip_ln_applies(kn: KernelNode) -> str | None:
    why = float_inputs_applies(kn, narrow=False)
    if why:
        return why
    x = kn.inputs[0]
    for i, info in enumerate(kn.inputs[1:5], 1):
        if info is not None and info.dtype != x.dtype:
            return f"input {i} is not {x.dtype} (or its type is unknown at session creation)"
    return None


def _build_skip_layer_norm(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    c = kn.inputs[0].dtype
    vec = numba_array(c, 1, readonly=True, layout="C")
    mat_in = numba_array(c, 2, readonly=True, layout="C")
    mat_out = numba_array(c, 2, readonly=False, layout="C")
    f32 = numba_array(np.dtype(np.float32), 1, readonly=False, layout="C")
    sig = types.void(mat_in, mat_in, vec, vec, vec, types.float64, mat_out, mat_out, f32, f32)
    kern = ctx.jit(_skip_layer_norm, [sig])
    eps = float(kn.attr("epsilon", 1e-5))
    name = kn.name
    n_out = len(kn.node.outputs)

    def run(x: Any, skip: Any, gamma: Any, beta: Any = None, bias: Any = None) -> tuple[Any, ...]:
        if x.ndim < 1 or x.dtype != c:
            raise InvalidArgument(f"{name}: input must be a {c} tensor, got {x.dtype} {x.shape}")
        n = x.shape[-1]
        rows = x.size // n if n else 0
        try:
            skip2 = np.broadcast_to(skip, x.shape)
            params = [np.broadcast_to(p, (n,)) if p is not None else None
                      for p in (gamma, beta, bias)]  # fmt: skip
        except ValueError:
            raise InvalidArgument(
                f"{name}: skip {skip.shape} or gamma/beta/bias do not fit input {x.shape}"
            ) from None
        g1, b1, bias1 = (np.zeros(n, c) if p is None else np.ascontiguousarray(p, dtype=c)
                         for p in params)  # fmt: skip
        x2 = np.ascontiguousarray(x).reshape(rows, n)
        s2 = np.ascontiguousarray(skip2, dtype=c).reshape(rows, n)
        y = np.empty((rows, n), c)
        total = np.empty((rows, n), c)
        mean = np.empty(rows, np.float32)
        inv = np.empty(rows, np.float32)
        if rows and n:
            kern(x2.size * 3, x2, s2, bias1, g1, b1, eps, y, total, mean, inv)
        stat = (*x.shape[:-1], 1)
        outs = (y.reshape(x.shape), mean.reshape(stat), inv.reshape(stat), total.reshape(x.shape))
        return outs[:n_out]

    return run


numba_kernel("SkipLayerNormalization", since=1, domain="ai.turnout", applies=_skip_ln_applies)(
    _build_skip_layer_norm
)
