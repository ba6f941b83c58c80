"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

One work item per (n, d1...) target position computes its weighted loss (SoftmaxCrossEntropy
first takes the log-softmax over the class axis, writing `log_prob` when asked), and a
one-item kernel reduces them ("none"/"sum"/"mean", the weighted mean dividing by the weight
sum as the ONNX reference does). A target outside [0, C) that is not `ignore_index` sets an
error flag the run reads back (one small read, a sync) and reports as InvalidArgument.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.loss import check_loss_shapes

from ..runtime import CTYPES, Runtime, buf
from .base import FLOATS, ocl_kernel

__all__: list[str] = []

_SRC = """
__kernel void loss_elems(long n, long C, long D, __global {T}* l, __global {T}* w,
                         __global int* bad, __global {T}* logp, __global const {T}* x,
                         __global const {I}* target, __global const {T}* weight, int has_w,
                         int has_ignore, long ignore, int softmax, int want_logp) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long b = gid / D, d = gid % D;
  __global const {T}* px = x + b * C * D + d;
  long t = (long)target[gid];
  bad[gid] = 0;
  {T} mx = -INFINITY, ls = 0;
  if (softmax) {{  /* log-softmax as (x - max) - log(sum(exp(x - max))): never log(0) */
    {T} s = 0;
    for (long c = 0; c < C; ++c) mx = fmax(mx, px[c * D]);
    for (long c = 0; c < C; ++c) s += exp(px[c * D] - mx);
    ls = log(s);
    if (want_logp)
      for (long c = 0; c < C; ++c) logp[b * C * D + c * D + d] = (px[c * D] - mx) - ls;
  }}
  if (has_ignore && t == ignore) {{ l[gid] = 0; w[gid] = 0; return; }}
  if (t < 0 || t >= C) {{ bad[gid] = 1; l[gid] = 0; w[gid] = 0; return; }}
  {T} lp = softmax ? (px[t * D] - mx) - ls : px[t * D];
  {T} wt = has_w ? weight[t] : ({T})1;
  l[gid] = -lp * wt;
  w[gid] = wt;
}}
__kernel void loss_reduce(long one, long n, __global {T}* out, __global int* flag,
                          __global const {T}* l,
                          __global const {T}* w, __global const int* bad, int mode,
                          int weighted) {{
  if (get_global_id(0) != 0) return;
  {A} sl = 0, sw = 0; int f = 0;
  for (long i = 0; i < n; ++i) {{ sl += l[i]; sw += w[i]; f |= bad[i]; }}
  flag[0] = f;
  out[0] = ({T})(mode == 1 ? sl : (weighted ? sl / sw : sl / ({A})n));
}}
"""
_REDUCTIONS = {"none": 0, "sum": 1, "mean": 2}


def _supports(kn: KernelNode, rt: Runtime) -> str | None:
    if kn.attr("reduction", "mean") not in _REDUCTIONS:
        return f"reduction {kn.attr('reduction')!r} is not defined"
    return None


def _loss(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    it = np.dtype(kn.inputs[1].dtype)
    A = "double" if dt == np.float64 else "float"
    k1, k2 = rt.build(_SRC.format(T=CTYPES[dt], I=CTYPES[it], A=A), "loss_elems", "loss_reduce")
    softmax = kn.op_type == "SoftmaxCrossEntropyLoss"
    red = _REDUCTIONS[kn.attr("reduction", "mean")]
    ignore = kn.attr("ignore_index")
    outs = kn.node.outputs
    want_logp = softmax and len(outs) > 1 and bool(outs[1])

    def run(x: Any, target: Any, weight: Any = None) -> tuple[Any, ...]:
        check_loss_shapes(kn.name, x, target, weight)
        shape = tuple(x.shape)
        C = shape[1]
        D = math.prod(shape[2:])
        n = shape[0] * D
        ls = rt.empty(tuple(target.shape), dt)
        ws = rt.empty((max(n, 1),), dt)
        bad = rt.empty((max(n, 1),), np.int32)
        logp = rt.empty(shape, dt) if want_logp else None
        # the reference's weighted mean: NLL weighs unless ignore_index is -1, SCE when set
        weighted = weight is not None or (ignore is not None if softmax else ignore != -1)
        if n:
            rt.launch(
                k1,
                n,
                np.int64(C),
                np.int64(D),
                buf(ls),
                buf(ws),
                buf(bad),
                buf(logp) if logp is not None else buf(ws),
                buf(x),
                buf(target),
                buf(weight) if weight is not None else buf(ws),
                np.int32(weight is not None),
                np.int32(ignore is not None),
                np.int64(ignore if ignore is not None else 0),
                np.int32(softmax),
                np.int32(want_logp),
            )
        flag = rt.empty((1,), np.int32)
        out = ls if red == 0 else rt.empty((), dt)
        rt.launch(
            k2,
            1,
            np.int64(n),
            buf(out) if red else buf(ws),
            buf(flag),
            buf(ls) if n else buf(ws),
            buf(ws),
            buf(bad),
            np.int32(red if red else 1),
            np.int32(weighted),
        ) if n else None
        if n and int(flag.get(rt.queue)[0]):
            raise InvalidArgument(f"{kn.name}: a target class index is outside [0, {C})")
        if red and not n:
            raise InvalidArgument(f"{kn.name}: cannot reduce an empty batch")
        return (out, logp)[: len(outs)] if softmax else (out,)

    return run


ocl_kernel("NegativeLogLikelihoodLoss", 12, dtypes=FLOATS, supports=_supports)(_loss)
ocl_kernel("SoftmaxCrossEntropyLoss", 12, dtypes=FLOATS, supports=_supports)(_loss)
