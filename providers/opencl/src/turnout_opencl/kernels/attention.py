"""Attention (ai.onnx opset 23+): one work item per query row.

The key/value caches are materialized as 4-D `present_key`/`present_value` (past then new, one
strided copy each); then each work item (batch, head, query) computes its row of scaled
scores with softcap and the combined bias (attention mask, causal frontier, sliding window,
non-pad key lengths), the softmax (into a scratch row), the optional `qk_matmul_output` and
the output row `P @ V`. Semantics follow the ONNX reference: scale applied as sqrt(scale) to
both Q and K, fully masked rows (bias all -inf) give zeros, grouped-query heads share a KV
head (`h // (q_heads / kv_heads)`). V and the value cache keep their own float type (T2 in the
schema, which may differ from Q's T1); accumulation is in double when either is float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.attention import attention_shapes

from ..runtime import CTYPES, Runtime, bcast_strides, buf, c_strides
from .base import FLOATS, ocl_kernel
from .copy import copier

__all__: list[str] = []

# m: Hq Sq L D Dv Hkv | q strides b h s d | y strides b h s d | mask strides b h s j | Mlen
#    past left right mode has_mask causal has_nonpad want_qk
_SRC = """
__kernel void attention(long n, __global const long* m, __global {T}* Y, __global {T}* QK,
                        __global const {T}* Q, __global const {T}* K, __global const {VT}* V,
                        __global const {MT}* mask, __global const long* nonpad,
                        __global {A}* P, {T} sq, {A} softcap) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long Hq = m[0], Sq = m[1], L = m[2], D = m[3], Dv = m[4], Hkv = m[5];
  long i = gid % Sq, t = gid / Sq, h = t % Hq, b = t / Hq;
  long hk = h / (Hq / Hkv);
  __global const {T}* q = Q + b * m[6] + h * m[7] + i * m[8];
  __global const {T}* kk = K + (b * Hkv + hk) * L * D;
  __global const {VT}* vv = V + (b * Hkv + hk) * L * Dv;
  __global {A}* p = P + gid * L;
  long Mlen = m[18], left = m[20], right = m[21], mode = m[22];
  int has_mask = m[23], causal = m[24], has_np = m[25], want_qk = m[26];
  long off = has_np ? nonpad[b] - Sq : m[19];
  long lim = has_np ? nonpad[b] : L;
  {A} mx = -INFINITY; int all_masked = 1;
  for (long j = 0; j < L; ++j) {{
    {A} s = 0;
    for (long d = 0; d < D; ++d) s += ({A})(q[d * m[9]] * sq) * ({A})(kk[j * D + d] * sq);
    if (softcap > 0) s = softcap * tanh(s / softcap);
    {A} bias = 0;
    if (has_mask) {{
      if (j < Mlen) {{
        {MT} mv = mask[b * m[14] + h * m[15] + i * m[16] + j * m[17]];
#if MASK_BOOL
        bias = mv ? ({A})0 : -INFINITY;
#else
        bias = ({A})mv;
#endif
      }} else bias = -INFINITY;
    }}
    long diff = i + off - j;
    if (causal && diff < 0) bias += -INFINITY;
    if ((left >= 0 && diff > left) || (right >= 0 && -diff > right)) bias += -INFINITY;
    if (has_np && j >= lim) bias += -INFINITY;
    if (!(bias == -INFINITY)) all_masked = 0;
    {A} x = s + bias;
    p[j] = x;
    mx = (x > mx || isnan(x)) ? x : mx;
    if (want_qk && mode != 3) QK[gid * L + j] = ({T})(mode == 2 ? x : s);
  }}
  {A} safe = (mx == -INFINITY) ? ({A})0 : mx;
  {A} sum = 0;
  for (long j = 0; j < L; ++j) {{ {A} e = exp(p[j] - safe); p[j] = e; sum += e; }}
  if (sum == 0) sum = 1;
  for (long j = 0; j < L; ++j) {{
    {A} v = all_masked ? ({A})0 : ({A})({T})(p[j] / sum);
    p[j] = v;
    if (want_qk && mode == 3) QK[gid * L + j] = ({T})v;
  }}
  __global {T}* y = Y + b * m[10] + h * m[11] + i * m[12];
  for (long e = 0; e < Dv; ++e) {{
    {A} acc = 0;
    for (long j = 0; j < L; ++j) acc += p[j] * ({A})vv[j * Dv + e];
    y[e * m[13]] = ({T})acc;
  }}
}}
"""


def _supports(kn: KernelNode, rt: Runtime) -> str | None:
    if kn.attr("softmax_precision") not in (None, 1, 11):
        return "Attention softmax_precision other than float/double is not implemented"
    return None


@ocl_kernel("Attention", 23, dtypes=FLOATS, supports=_supports)
def attention(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    v_info = kn.inputs[2]
    vdt = np.dtype(v_info.dtype) if v_info is not None and v_info.dtype is not None else dt
    T = CTYPES[dt]
    A = "double" if np.float64 in (dt, vdt) else "float"
    mask_info = kn.inputs[3] if len(kn.inputs) > 3 else None
    mask_bool = mask_info is not None and mask_info.dtype == np.bool_
    MT = "uchar" if mask_bool or mask_info is None else CTYPES[np.dtype(mask_info.dtype)]
    src = f"#define MASK_BOOL {int(mask_bool)}\n" + _SRC.format(T=T, VT=CTYPES[vdt], A=A, MT=MT)
    (k,) = rt.build(src, "attention")
    cp, vcp = copier(rt, dt), copier(rt, vdt)
    qh_attr, kvh_attr = kn.attr("q_num_heads"), kn.attr("kv_num_heads")
    scale_attr = kn.attr("scale")
    softcap = float(kn.attr("softcap", 0.0) or 0.0)
    causal = int(kn.attr("is_causal", 0))
    left, right = int(kn.attr("left_window_size", -1)), int(kn.attr("right_window_size", -1))
    mode = int(kn.attr("qk_matmul_output_mode", 0))
    outs = kn.node.outputs
    want_qk = len(outs) > 3 and bool(outs[3])
    adt = np.float64 if A == "double" else np.float32

    def as4(x: Any, heads: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(B, H, S, D) shape and element strides of a 3-D or 4-D input (already checked)."""
        if len(x.shape) == 4:
            return tuple(x.shape), c_strides(tuple(x.shape))
        b, s, hid = x.shape
        d = hid // heads
        return (b, heads, s, d), (s * hid, d, hid, 1)

    def cache(
        x: Any, past: Any, shape4: tuple[int, ...], st4: tuple[int, ...], xdt: np.dtype[Any]
    ) -> Any:
        b, hh, s, d = shape4
        p = 0 if past is None else past.shape[2]
        shape = (b, hh, p + s, d)
        if np.dtype(x.dtype) != xdt or (past is not None and np.dtype(past.dtype) != xdt):
            raise InvalidArgument(f"{kn.name}: {x.dtype} input where {xdt} was declared")
        copy = vcp if xdt == vdt else cp
        out = rt.empty(shape, xdt)
        ost = c_strides(shape)
        if past is not None:
            copy(out, 0, ost, past, 0, c_strides(tuple(past.shape)), tuple(past.shape))
        copy(out, p * ost[2], ost, x, 0, st4, shape4)
        return out

    def shape_of(a: Any) -> tuple[int, ...] | None:
        return None if a is None else tuple(a.shape)

    def run(
        q: Any,
        kx: Any,
        vx: Any,
        mask: Any = None,
        past_k: Any = None,
        past_v: Any = None,
        nonpad: Any = None,
    ) -> tuple[Any, ...]:
        shapes = attention_shapes(
            kn.name, kn.since_version, tuple(q.shape), tuple(kx.shape), tuple(vx.shape),
            q_num_heads=None if qh_attr is None else int(qh_attr),
            kv_num_heads=None if kvh_attr is None else int(kvh_attr),
            attn_mask=shape_of(mask), past_key=shape_of(past_k), past_value=shape_of(past_v),
            nonpad_kv_seqlen=shape_of(nonpad),
        )  # fmt: skip
        rank = shapes.rank
        qs, qst = as4(q, shapes.q_heads)
        ks, kst = as4(kx, shapes.kv_heads)
        vs, vst = as4(vx, shapes.kv_heads)
        B, Hq, Sq, D = qs
        Hkv, Dv = shapes.kv_heads, shapes.v_head_size
        pk = cache(kx, past_k, ks, kst, dt)
        pv = cache(vx, past_v, vs, vst, vdt)
        L = pk.shape[2]
        scale = scale_attr if scale_attr is not None else 1 / math.sqrt(D)
        sq = dt.type(math.sqrt(scale))
        if rank == 4:
            y = rt.empty((B, Hq, Sq, Dv), dt)
            yst = c_strides((B, Hq, Sq, Dv))
        else:
            y = rt.empty((B, Sq, Hq * Dv), dt)
            yst = (Sq * Hq * Dv, Dv, Hq * Dv, 1)
        qk = rt.empty((B, Hq, Sq, L), dt) if want_qk else None
        mst: tuple[int, ...] = (0, 0, 0, 0)
        mlen = 0
        if mask is not None:  # attention_shapes checked that it fits
            mlen = mask.shape[-1]
            mst = bcast_strides(tuple(mask.shape), (B, Hq, Sq, mlen))
        past = 0 if past_k is None else past_k.shape[2]
        meta = (Hq, Sq, L, D, Dv, Hkv, *qst, *yst, *mst, mlen, past, left, right, mode)
        meta += (int(mask is not None), causal, int(nonpad is not None), int(want_qk))
        n = B * Hq * Sq
        if n and y.size + (qk.size if qk is not None else 0):
            scratch = rt.empty((n * max(L, 1),), adt)
            rt.launch(
                k,
                n,
                rt.meta(tuple(int(v) for v in meta)),
                buf(y) if y.size else buf(scratch),
                buf(qk) if qk is not None and qk.size else buf(scratch),
                buf(q) if q.size else buf(scratch),
                buf(pk) if pk.size else buf(scratch),
                buf(pv) if pv.size else buf(scratch),
                buf(mask) if mask is not None and mask.size else buf(scratch),
                buf(nonpad) if nonpad is not None else buf(scratch),
                buf(scratch),
                sq,
                adt(softcap),
            )
        res = (y, pk, pv, qk)
        return res[: len(outs)]

    return run
