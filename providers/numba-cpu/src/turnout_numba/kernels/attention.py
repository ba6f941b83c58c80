"""Attention (ai.onnx 23, 24, 25): BLAS matmuls in numpy, the per-row middle in numba.

The wrapper brings 3-D inputs to (batch, heads, seq, head_size), appends past_key/past_value,
scales Q and K by sqrt(scale) each (as the spec's function body does) and computes the scores
with one grouped matmul: grouped-query heads read their KV head through a (batch, kv_heads,
group, ...) view, never a repeated copy. The additive bias (attn_mask, bottom-right causal,
sliding window, nonpad_kv_seqlen padding) is built once at its broadcast shape. One compiled
row kernel then applies softcap, the bias, the softmax and the fully-masked-row guard (a row
whose bias is all -inf gets probabilities 0), and records qk_matmul_output where asked.

float16/bfloat16 compute in float32 but round to their dtype after every step the function body
rounds (each op's output is of type T), so results match a graph of the same ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types
from numpy.typing import DTypeLike

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.attention import attention_shapes

from ..codegen import compute_dtype, numba_array
from ..registry import BuildContext, numba_kernel

__all__: list[str] = []

# rounding modes of the row kernel: none (the compute dtype), float16, bfloat16
_R_NONE, _R_F16, _R_BF16 = 0, 1, 2
_SOFTMAX_PRECISION: dict[int, DTypeLike] = {
    1: np.float32,
    10: np.float16,
    11: np.float64,
    16: "bfloat16",
}


def _attn_rows(
    s: Any,
    bias: Any,
    softcap: float,
    mode: int,
    want_qk: bool,
    rnd: int,
    srnd: int,
    p: Any,
    qk: Any,
) -> None:  # pragma: no cover - compiled by numba
    def _rnd(v: float, mode: int) -> float:  # an inner function: compiled (inlined) with the kernel
        """Round a float64 value to float16 or bfloat16 precision (nearest), kept as float64."""
        if mode == 0 or not np.isfinite(v):
            return v
        if mode == 1:
            a = abs(v)
            if a >= 65520.0:
                return np.inf if v > 0 else -np.inf
            if a < 6.103515625e-05:  # float16 subnormals: multiples of 2**-24
                c = 402653184.0  # 1.5 * 2**28: its float64 ulp is 2**-24
                return (v + c) - c
            t = v * 4398046511105.0  # Veltkamp split at 53 - 11 bits: 2**42 + 1
            return t - (t - v)
        t = v * 35184372088833.0  # bfloat16: 53 - 8 bits, 2**45 + 1
        w = t - (t - v)
        if abs(w) > 3.3895313892515355e38:
            return np.inf if v > 0 else -np.inf
        return w

    nb, nh, nq, nk = s.shape
    rows = nb * nh * nq
    for r in prange(rows):
        b = r // (nh * nq)
        h = (r // nq) % nh
        i = r % nq
        x = np.empty(nk, np.float64)
        bmax = -np.inf
        for j in range(nk):
            v = np.float64(s[b, h, i, j])
            if softcap > 0.0:
                v = _rnd(_rnd(np.tanh(_rnd(v / softcap, rnd)), rnd) * softcap, rnd)
            if want_qk and mode <= 1:
                qk[b, h, i, j] = v
            bj = np.float64(bias[b, h, i, j])
            if bj > bmax or bj != bj:
                bmax = bj
            v = _rnd(v + bj, rnd)
            if want_qk and mode == 2:
                qk[b, h, i, j] = v
            x[j] = _rnd(v, srnd)
        masked = bmax == -np.inf
        m = -np.inf
        for j in range(nk):
            if x[j] > m or x[j] != x[j]:
                m = x[j]
        if m == -np.inf:
            m = 0.0
        tot = 0.0
        for j in range(nk):
            e = _rnd(np.exp(_rnd(x[j] - m, srnd)), srnd)
            x[j] = e
            tot = _rnd(tot + e, 2) if srnd == 2 else tot + e  # bfloat16 sums round each add
        tot = _rnd(tot, srnd)
        if tot == 0.0:
            tot = 1.0
        for j in range(nk):
            v = 0.0 if masked else _rnd(_rnd(x[j] / tot, srnd), rnd)
            p[b, h, i, j] = v
            if want_qk and mode == 3:
                qk[b, h, i, j] = v


def _applies(kn: KernelNode) -> str | None:
    q = kn.inputs[0]
    if q is None or q.elem_type is None:
        return "input types unknown at session creation"
    c = compute_dtype(q.dtype)
    if c is None or c.kind != "f":
        return f"Attention on {q.dtype} is not compiled by numba"
    mixed = [
        i.name
        for i in kn.inputs[1:3]
        if i is not None and i.dtype is not None and i.dtype != q.dtype
    ]
    if mixed:  # onnxruntime refuses the model; the numpy kernel names the input at run time
        return f"{', '.join(mixed)} not of Q's type {q.dtype}"
    sp = kn.attr("softmax_precision", None)
    if sp is not None and int(sp) not in _SOFTMAX_PRECISION:
        return f"softmax_precision {sp} is not supported"
    return None


def _round_mode(dt: np.dtype[Any]) -> int:
    if dt == np.float16:
        return _R_F16
    if dt.name == "bfloat16":
        return _R_BF16
    return _R_NONE


def _grouped_matmul(a: Any, b: Any, hkv: int) -> Any:
    """a (B, Hq, M, K) @ b (B, Hkv, K, N): query head h uses KV head h // (Hq // Hkv)."""
    nb, hq, m, _ = a.shape
    g = hq // hkv
    out = np.matmul(a.reshape(nb, hkv, g, m, a.shape[3]), b[:, :, None])
    return out.reshape(nb, hq, m, b.shape[3])


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    arr4 = numba_array(c, 4, readonly=False, layout="C")
    sig = types.void(
        numba_array(c, 4, readonly=True, layout="C"),
        numba_array(c, 4, readonly=True, layout="A"),
        types.float64,
        types.int64,
        types.boolean,
        types.int64,
        types.int64,
        arr4,
        arr4,
    )
    kern = ctx.jit(_attn_rows, [sig])  # small inputs run the serial variant

    name = kn.name
    version = kn.since_version
    scale_attr = kn.attr("scale", None)
    is_causal = bool(kn.attr("is_causal", 0))
    qh_attr = kn.attr("q_num_heads", None)
    kvh_attr = kn.attr("kv_num_heads", None)
    softcap = float(kn.attr("softcap", 0.0) or 0.0)
    mode = int(kn.attr("qk_matmul_output_mode", 0))
    sp = kn.attr("softmax_precision", None)
    left = int(kn.attr("left_window_size", -1)) if version >= 25 else -1
    right = int(kn.attr("right_window_size", -1)) if version >= 25 else -1
    outs = list(kn.node.outputs)
    n_out = len(outs)
    want_qk = n_out > 3 and bool(outs[3])
    rnd = _round_mode(dt)
    sdt = np.dtype(_SOFTMAX_PRECISION[int(sp)]) if sp is not None else None
    if sdt is None:
        srnd = rnd
    elif sdt.itemsize >= 4:
        srnd = _R_NONE
    else:
        srnd = _round_mode(sdt)
    if mode not in (0, 1, 2, 3):
        raise InvalidArgument(f"{name}: qk_matmul_output_mode {mode} is not 0..3")
    if left < -1 or right < -1:
        raise InvalidArgument(f"{name}: window sizes must be -1 or >= 0")

    def to_c(a: Any) -> Any:
        return a if a.dtype == c else a.astype(c)

    def round_t(a: Any) -> Any:
        """Round a compute-dtype array to the node's dtype (float16/bfloat16)."""
        return a.astype(dt).astype(c) if rnd else a

    def to_4d(x: Any, heads: int) -> Any:
        nb, sq, hidden = x.shape
        return x.reshape(nb, sq, heads, hidden // heads).transpose(0, 2, 1, 3)

    def shape_of(a: Any) -> Any:
        return None if a is None else np.shape(a)

    def run(q: Any, k: Any, v: Any, *opt: Any) -> tuple[Any, ...]:
        opt = (*opt, None, None, None, None)
        mask, past_k, past_v, nonpad = opt[0], opt[1], opt[2], opt[3]
        for a, what in ((q, "Q"), (k, "K"), (v, "V")):
            if a.dtype != dt:
                raise InvalidArgument(f"{name}: {what} is {a.dtype}, expected {dt}")
        shapes = attention_shapes(
            name, version, q.shape, k.shape, v.shape,
            q_num_heads=None if qh_attr is None else int(qh_attr),
            kv_num_heads=None if kvh_attr is None else int(kvh_attr),
            attn_mask=shape_of(mask), past_key=shape_of(past_k), past_value=shape_of(past_v),
            nonpad_kv_seqlen=shape_of(nonpad),
        )  # fmt: skip
        rank3 = shapes.rank == 3
        if rank3:
            q = to_4d(q, shapes.q_heads)
            k, v = to_4d(k, shapes.kv_heads), to_4d(v, shapes.kv_heads)
        if past_k is not None:
            k = np.concatenate((past_k.astype(dt, copy=False), k), axis=2)
            v = np.concatenate((past_v.astype(dt, copy=False), v), axis=2)
        present_k, present_v = k, v
        nb, hq, sq, dq = q.shape
        hkv, skv = shapes.kv_heads, shapes.kv_len
        scale = float(scale_attr) if scale_attr is not None else 1.0 / np.sqrt(dq)
        sc = c.type(dt.type(np.sqrt(scale)))
        qs = round_t(to_c(q) * sc)
        kt = round_t(to_c(k) * sc).transpose(0, 1, 3, 2)
        scores = np.ascontiguousarray(round_t(_grouped_matmul(qs, kt, hkv)), dtype=c)

        bias = _bias(mask, nonpad, past_k, nb, sq, skv)
        bias4 = np.broadcast_to(bias, (nb, hq, sq, skv))  # attention_shapes checked it
        p = np.empty((nb, hq, sq, skv), c)
        qk = np.empty((nb, hq, sq, skv) if want_qk else (1, 1, 1, 1), c)
        if p.size:
            kern(scores.size, scores, bias4, softcap, mode, want_qk, rnd, srnd, p, qk)
        y = round_t(_grouped_matmul(p, to_c(v), hkv))
        if rank3:
            y = y.transpose(0, 2, 1, 3).reshape(nb, sq, -1)
        res: list[Any] = [y.astype(dt)]
        if n_out > 1:
            res.append(present_k if outs[1] else None)
        if n_out > 2:
            res.append(present_v if outs[2] else None)
        if n_out > 3:
            res.append(qk.astype(dt) if want_qk else None)
        return tuple(res)

    def _bias(mask: Any, nonpad: Any, past_k: Any, nb: int, sq: int, skv: int) -> Any:
        """The additive bias, at its broadcast shape, in the compute dtype."""
        if mask is not None:
            if mask.dtype == np.bool_:
                mb = np.where(mask, c.type(0), c.type(-np.inf)).astype(c)
            else:
                mb = to_c(mask)
            pad = skv - mask.shape[-1]
            if pad:
                mb = np.pad(mb, [(0, 0)] * (mb.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        if nonpad is not None:
            lens = np.asarray(nonpad, np.int64).reshape(-1)
            offset: Any = (lens - sq).reshape(-1, 1, 1, 1)
        else:
            offset = past_k.shape[2] if past_k is not None else 0
        bias: Any = np.zeros((sq, skv), c)
        if mask is not None:
            bias = bias + mb
        ii = np.arange(sq).reshape(sq, 1)
        jj = np.arange(skv).reshape(1, skv)
        diff = ii + offset - jj  # query position minus key position
        allowed = None
        if is_causal:
            allowed = diff >= 0
        if left >= 0:
            allowed = diff <= left if allowed is None else allowed & (diff <= left)
        if right >= 0:
            allowed = -diff <= right if allowed is None else allowed & (-diff <= right)
        if allowed is not None:
            bias = bias + np.where(allowed, c.type(0), c.type(-np.inf))
        if nonpad is not None:
            keep = np.arange(skv) < np.asarray(nonpad, np.int64).reshape(-1, 1)
            bias = bias + np.where(keep, c.type(0), c.type(-np.inf)).reshape(nb, 1, 1, skv)
        return bias.astype(c, copy=False)

    return run


numba_kernel("Attention", since=23, applies=_applies)(_build)
