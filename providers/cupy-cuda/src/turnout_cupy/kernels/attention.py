"""Attention (ai.onnx, opset 23) on `be.xp`: two batched matmuls (cuBLAS) around a softmax.

The input checks and sizes are `turnout.sdk.semantics.attention_shapes`, shared with every
provider. 3-D inputs are split into heads; a past cache is prepended to K and V (and returned
as present_key/present_value); grouped-query heads read their KV head; the mask (bool: keep
where true; float: added) may cover fewer keys than there are, the rest masked out; is_causal
masks keys after the query's position (offset by the past), left/right_window_size keep a
local window around it; a query whose keys are all masked attends to nothing; softcap bounds
the scores with tanh; qk_matmul_output_mode picks which scores the fourth output returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import attention_shapes

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []


def _shape(v: Any) -> tuple[int, ...] | None:
    return None if v is None else tuple(v.shape)


@cuda_kernel("Attention", 23, applies=float_only)
def attention(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    causal = bool(kn.attr("is_causal", 0))
    qh_attr, kvh_attr = kn.attr("q_num_heads"), kn.attr("kv_num_heads")
    scale_attr = kn.attr("scale")
    softcap = float(kn.attr("softcap", 0.0))
    qk_mode = int(kn.attr("qk_matmul_output_mode", 0))
    left, right = int(kn.attr("left_window_size", -1)), int(kn.attr("right_window_size", -1))
    n_out = len(kn.node.outputs)

    def heads(t: Any, n: int) -> Any:
        return t if t.ndim == 4 else t.reshape(t.shape[0], t.shape[1], n, -1).transpose(0, 2, 1, 3)

    def run(
        q: Any,
        k: Any,
        v: Any,
        mask: Any = None,
        past_k: Any = None,
        past_v: Any = None,
        nonpad: Any = None,
    ) -> tuple[Any, ...]:
        s = attention_shapes(
            kn.name,
            kn.since_version,
            q.shape,
            k.shape,
            v.shape,
            q_num_heads=qh_attr,
            kv_num_heads=kvh_attr,
            attn_mask=_shape(mask),
            past_key=_shape(past_k),
            past_value=_shape(past_v),
            nonpad_kv_seqlen=_shape(nonpad),
        )
        q4, k4, v4 = heads(q, s.q_heads), heads(k, s.kv_heads), heads(v, s.kv_heads)
        if past_k is not None:
            k4 = xp.concatenate([past_k, k4], axis=2)
            v4 = xp.concatenate([past_v, v4], axis=2)
        present_k, present_v = k4, v4
        if s.group > 1:
            k4, v4 = xp.repeat(k4, s.group, axis=1), xp.repeat(v4, s.group, axis=1)
        scale = float(scale_attr) if scale_attr is not None else 1 / np.sqrt(s.head_size)
        root = q.dtype.type(np.sqrt(scale))  # Q and K each scaled by its root, as the spec
        scores = xp.matmul(q4 * root, xp.swapaxes(k4 * root, -1, -2))
        if softcap > 0:  # before the mask, so masked keys stay -inf
            scores = softcap * xp.tanh(scores / softcap)
        bias = _bias(xp, s, mask, nonpad, past_k is not None, causal, left, right, scores.dtype)
        biased = scores + bias
        # softmax in float32 at least; a row whose bias masks every key attends to nothing
        wide = biased.astype(np.float32) if biased.dtype.itemsize < 4 else biased
        empty = xp.max(bias, axis=-1, keepdims=True) == -np.inf
        top = xp.max(wide, axis=-1, keepdims=True)
        e = xp.exp(wide - xp.where(empty | ~xp.isfinite(top), 0, top))
        total = xp.sum(e, axis=-1, keepdims=True)
        p = xp.where(empty, 0, e / xp.where(empty, 1, total)).astype(q.dtype)
        qk = (scores, scores, biased, p)
        y = xp.matmul(p, v4)
        if s.rank == 3:
            y = y.transpose(0, 2, 1, 3).reshape(s.batch, s.q_len, -1)
        outs = (y, present_k, present_v, qk[min(qk_mode, 3)].astype(q.dtype))
        return outs[:n_out]

    return run


def _bias(
    xp: Any,
    s: Any,
    mask: Any,
    nonpad: Any,
    has_past: bool,
    causal: bool,
    left: int,
    right: int,
    dtype: Any,
) -> Any:
    """The additive bias (0 or -inf, plus a float mask), broadcastable to the scores."""
    bias = xp.zeros((s.q_len, s.kv_len), dtype=dtype)
    if mask is not None:
        m = xp.where(mask, 0, -np.inf) if mask.dtype == np.bool_ else mask
        pad = s.kv_len - m.shape[-1]
        if pad:
            width = [(0, 0)] * (m.ndim - 1) + [(0, pad)]
            m = xp.pad(m, width, mode="constant", constant_values=-np.inf)
        bias = bias + m.astype(dtype)
    # each query's position among the keys: after the past cache; without one, with
    # nonpad_kv_seqlen, the last q_len positions of its batch's valid keys
    offset: Any = s.past_len
    if not has_past and nonpad is not None:
        offset = (xp.asarray(nonpad).astype(np.int64) - s.q_len).reshape(-1, 1, 1, 1)
    pos = xp.arange(s.q_len)[:, None] + offset
    keys = xp.arange(s.kv_len)[None, :]
    if causal:
        bias = xp.where(keys > pos, -np.inf, bias)
    if left >= 0:  # a local window: at most `left` keys before the query's position
        bias = xp.where(keys < pos - left, -np.inf, bias)
    if right >= 0:
        bias = xp.where(keys > pos + right, -np.inf, bias)
    if nonpad is not None:
        keep = keys < xp.asarray(nonpad).reshape(-1, 1)
        bias = bias + xp.where(keep, 0, -np.inf).astype(dtype)[:, None, None, :]
    return bias.astype(dtype)
