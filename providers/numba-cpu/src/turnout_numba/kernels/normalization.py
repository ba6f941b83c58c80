"""Softmax, LogSoftmax and LayerNormalization: row kernels, one pass to reduce and one to write.

Softmax works on a (pre, n, post) view of its axis (flattened to 2-D before opset 13, as the
spec says); LayerNormalization on (rows, normalized size) with scale/bias broadcast once to the
normalized shape. Statistics accumulate in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode

from ..codegen import compute_dtype, numba_array
from ..registry import BuildContext, float_inputs_applies, numba_kernel

__all__: list[str] = []


def _softmax(x: Any, out: Any, log: bool) -> None:  # pragma: no cover - compiled by numba
    pre, n, post = x.shape
    for i in prange(pre):
        m = np.empty(post, np.float64)
        s = np.zeros(post, np.float64)
        for p in range(post):
            m[p] = x[i, 0, p]
        for r in range(1, n):
            for p in range(post):
                v = x[i, r, p]
                if v > m[p] or v != v:
                    m[p] = v
        for r in range(n):
            for p in range(post):
                e = np.exp(np.float64(x[i, r, p]) - m[p])
                s[p] += e
                if not log:
                    out[i, r, p] = e
        for r in range(n):
            for p in range(post):
                if log:
                    out[i, r, p] = np.float64(x[i, r, p]) - m[p] - np.log(s[p])
                else:
                    out[i, r, p] = out[i, r, p] / s[p]


def _build_softmax(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    log = kn.op_type == "LogSoftmax"
    sig = types.void(
        numba_array(c, 3, readonly=True, layout="C"),
        numba_array(c, 3, readonly=False, layout="C"),
        types.boolean,
    )
    kern = ctx.jit(_softmax, [sig])
    flatten = kn.since_version < 13
    axis0 = int(kn.attr("axis", 1 if flatten else -1))
    name = kn.name

    def run(x: Any) -> tuple[Any, ...]:
        nd = x.ndim
        axis = axis0 + nd if axis0 < 0 else axis0
        if not 0 <= axis < max(nd, 1):
            raise InvalidArgument(f"{name}: axis {axis0} out of range for rank {nd}")
        shape = x.shape
        if flatten:
            pre, n, post = int(np.prod(shape[:axis])), int(np.prod(shape[axis:])), 1
        else:
            pre, n, post = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1 :]))
        if x.size == 0:
            return (np.empty(shape, dt),)
        x3 = np.ascontiguousarray(x).reshape(pre, n, post)
        if x3.dtype != c:
            x3 = x3.astype(c)
        out = np.empty((pre, n, post), c)
        kern(x3.size * 3, x3, out, log)
        res = out.reshape(shape)
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
        axis = axis0 + nd if axis0 < 0 else axis0
        if not 0 <= axis < max(nd, 1):
            raise InvalidArgument(f"{name}: axis {axis0} out of range for rank {nd}")
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
