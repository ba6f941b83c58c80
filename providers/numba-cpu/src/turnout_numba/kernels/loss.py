"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: one compiled pass over (N, C, D).

Inputs are viewed as (N, C, D) with D the product of the trailing dimensions, targets as
(N, D). For each sample (in parallel) the kernel checks every target (ignore_index honoured;
anything else outside [0, C) is reported, and the wrapper raises InvalidArgument naming the
node), gathers -x[n, t, d] * weight[t] and the weight itself, and for SoftmaxCrossEntropyLoss
first writes the log-softmax over C. Sums accumulate in float64; float16/bfloat16 compute in
float32 and round once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.loss import check_loss_shapes

from ..codegen import compute_dtype, numba_array
from ..registry import BuildContext, numba_kernel

__all__: list[str] = []

_REDUCTIONS = ("none", "sum", "mean")


def _loss_rows(
    x: Any,
    t: Any,
    w: Any,
    ignore: int,
    has_ignore: bool,
    softmax: bool,
    logp: Any,
    loss: Any,
    wt: Any,
    bad: Any,
) -> None:  # pragma: no cover - compiled by numba
    n, c, d = x.shape
    for i in prange(n):
        bad[i] = -1
        if softmax:  # log-softmax over the class axis, column by column
            for k in range(d):
                m = -np.inf
                for j in range(c):
                    v = np.float64(x[i, j, k])
                    if v > m or v != v:
                        m = v
                s = 0.0
                for j in range(c):
                    s += np.exp(np.float64(x[i, j, k]) - m)
                ls = m + np.log(s)
                for j in range(c):
                    logp[i, j, k] = np.float64(x[i, j, k]) - ls
        for k in range(d):
            tk = np.int64(t[i, k])
            if has_ignore and tk == ignore:
                loss[i, k] = 0.0
                wt[i, k] = 0.0
                continue
            if tk < 0 or tk >= c:
                if bad[i] < 0:
                    bad[i] = k
                loss[i, k] = 0.0
                wt[i, k] = 0.0
                continue
            v = logp[i, tk, k] if softmax else x[i, tk, k]
            loss[i, k] = -np.float64(v) * w[tk]
            wt[i, k] = w[tk]


def _applies(kn: KernelNode) -> str | None:
    x, t = kn.inputs[0], kn.inputs[1]
    if x is None or t is None or x.elem_type is None or t.elem_type is None:
        return "input types unknown at session creation"
    c = compute_dtype(x.dtype)
    if c is None or c.kind != "f":
        return f"{kn.op_type} on {x.dtype} is not compiled by numba"
    if t.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        return f"target dtype {t.dtype} is not compiled by numba"
    if len(kn.inputs) > 2 and kn.inputs[2] is not None:
        w = kn.inputs[2]
        if w.elem_type is None or w.dtype != x.dtype:
            return "weight type unknown at session creation or not the input's"
    red = kn.attr("reduction", "mean")
    if red not in _REDUCTIONS:
        return f"reduction {red!r} is not one of {_REDUCTIONS}"
    return None


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    tdt = kn.inputs[1].dtype
    arr3 = numba_array(c, 3, readonly=False, layout="C")
    arr2 = numba_array(c, 2, readonly=False, layout="C")
    sig = types.void(
        numba_array(c, 3, readonly=True, layout="C"),
        numba_array(tdt, 2, readonly=True, layout="C"),
        numba_array(c, 1, readonly=True, layout="C"),
        types.int64,
        types.boolean,
        types.boolean,
        arr3,
        arr2,
        arr2,
        types.Array(types.int64, 1, "C"),
    )
    kern = ctx.jit(_loss_rows, [sig])  # small inputs run the serial variant
    name = kn.name
    softmax = kn.op_type == "SoftmaxCrossEntropyLoss"
    red = kn.attr("reduction", "mean")
    ii = kn.attr("ignore_index", None)
    has_ignore = ii is not None
    ignore = int(ii) if has_ignore else 0
    want_logp = softmax and len(kn.node.outputs) > 1 and bool(kn.node.outputs[1])
    n_out = len(kn.node.outputs)

    def run(x: Any, target: Any, weight: Any = None) -> tuple[Any, ...]:
        check_loss_shapes(name, x, target, weight)
        nb, nc = x.shape[0], x.shape[1]
        d = int(np.prod(x.shape[2:]))
        x3 = np.ascontiguousarray(x, dtype=c).reshape(nb, nc, d)
        t2 = np.ascontiguousarray(target, dtype=tdt).reshape(nb, d)
        w = np.ones(nc, c) if weight is None else np.ascontiguousarray(weight, dtype=c)
        logp = np.empty((nb, nc, d) if softmax else (1, 1, 1), c)
        loss = np.empty((nb, d), c)
        wt = np.empty((nb, d), c)
        bad = np.full(max(nb, 1), -1, np.int64)
        if nb and d:
            kern(x3.size, x3, t2, w, ignore, has_ignore, softmax, logp, loss, wt, bad)
        rows = np.flatnonzero(bad[:nb] >= 0)
        if rows.size:
            i = int(rows[0])
            v = int(t2[i, bad[i]])
            raise InvalidArgument(
                f"{name}: target {v} out of range for {nc} classes"
                + (f" (ignore_index {ignore})" if has_ignore else "")
            )
        if red == "none":
            out = loss.reshape(target.shape)
        elif red == "sum":
            out = np.asarray(loss.sum(dtype=np.float64))
        else:
            out = np.asarray(loss.sum(dtype=np.float64) / wt.sum(dtype=np.float64))
        res: list[Any] = [out.astype(dt)]
        if n_out > 1:
            res.append(logp.reshape(x.shape).astype(dt) if want_logp else None)
        return tuple(res)

    return run


numba_kernel("NegativeLogLikelihoodLoss", since=12, applies=_applies)(_build)
numba_kernel("SoftmaxCrossEntropyLoss", since=12, applies=_applies)(_build)
