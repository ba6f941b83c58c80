"""numpy kernels of the contrib attention ops: Attention (with its input projection),
MultiHeadAttention, RotaryEmbedding and GroupQueryAttention (com.microsoft).

Scores and softmax are computed in float32 (float64 for double), as onnxruntime's CPU kernels
do; masks are additive, a masked position getting `mask_filter_value` (default -10000).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []

Array = np.ndarray[Any, Any]
_FILTER = -10000.0


def _heads(t: Array, heads: int) -> Array:
    """[B, S, N*H] -> [B, N, S, H]."""
    b, s, width = t.shape
    return t.reshape(b, s, heads, width // heads).transpose(0, 2, 1, 3)


def _merge(t: Array) -> Array:
    """[B, N, S, H] -> [B, S, N*H]."""
    b, n, s, h = t.shape
    return t.transpose(0, 2, 1, 3).reshape(b, s, n * h)


def _softmax(scores: Array) -> Array:
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    out: Array = e / e.sum(axis=-1, keepdims=True)
    return out


def _attend(
    q: Array, k: Array, v: Array, scale: float, additive: Array | None
) -> tuple[Array, Array]:
    """softmax(q k^T * scale + additive) v over [B, N, S, H] inputs, in the compute dtype;
    returns the output and the scaled scores (with the additive part)."""
    ct = np.float64 if q.dtype == np.float64 else np.float32
    scores = np.matmul(q.astype(ct), np.swapaxes(k.astype(ct), -1, -2)) * ct(scale)
    if additive is not None:
        scores = scores + additive
    return np.matmul(_softmax(scores), v.astype(ct)), scores


def _causal(seq: int, total: int, past: int) -> Array:
    """Where query i (at position past + i) must not see key j of `total`.

    As onnxruntime's CPU kernels, the last query row sees every key: they mask rows
    0..seq-2 only, which is the same thing when total is past + seq (self-attention) and
    differs for MultiHeadAttention over a longer key sequence."""
    blocked = np.arange(total)[None, :] > (past + np.arange(seq))[:, None]
    blocked[-1:] = False
    return blocked


def _padding_mask(
    node: KernelNode, mask: Array, batch: int, seq: int, total: int, filter_value: float
) -> Array:
    """An additive [B, 1, S, T] mask from a mask index: [B] key lengths, [2B] ends then starts,
    or a raw 0/1 mask [B, T], [B, S, T] or [B, 1, M, M] (its [past, past + S) rows)."""
    keys = np.arange(total)
    if mask.ndim == 1 and mask.shape[0] in (batch, 2 * batch):
        masked = keys[None, :] >= mask[:batch, None]
        if mask.shape[0] == 2 * batch:
            masked |= keys[None, :] < mask[batch:, None]
        blocked = masked[:, None, None, :]
    elif mask.ndim == 2 and mask.shape == (batch, total):
        blocked = (mask == 0)[:, None, None, :]
    elif mask.ndim == 3 and mask.shape == (batch, seq, total):
        blocked = (mask == 0)[:, None, :, :]
    elif mask.ndim == 4 and mask.shape[:2] == (batch, 1) and mask.shape[2] >= total:
        past = total - seq
        blocked = mask[:, :, past:total, :total] == 0
    else:
        raise InvalidArgument(
            f"{node.name}: mask of shape {mask.shape} fits none of the mask layouts for batch "
            f"{batch}, sequence {seq}, total sequence {total}"
        )
    return np.where(blocked, np.float32(filter_value), np.float32(0))


def _masks(
    node: KernelNode,
    mask: Array | None,
    causal: bool,
    shape: tuple[int, int, int, int],
    filter_value: float,
) -> Array | None:
    """The additive mask of a mask index and of causality (batch, sequence, past, total): a
    padded key gets `filter_value`; a future key the lowest float, replacing the padding value
    (as onnxruntime does, so a row whose visible keys are all padded still attends to them)."""
    batch, seq, past, total = shape
    out = None if mask is None else _padding_mask(node, mask, batch, seq, total, filter_value)
    if causal:
        lowest = np.float32(np.finfo(np.float32).min)
        out = np.where(_causal(seq, total, past), lowest, np.float32(0) if out is None else out)
    return out


def _bias_term(node: KernelNode, bias: Array, scores_shape: tuple[int, ...]) -> Array:
    try:
        np.broadcast_shapes(bias.shape, scores_shape)
    except ValueError:
        raise InvalidArgument(
            f"{node.name}: attention_bias {bias.shape} does not broadcast to {scores_shape}"
        ) from None
    return bias.astype(np.float32)


def _combine(parts: list[Array | None]) -> Array | None:
    found = [p for p in parts if p is not None]
    if not found:
        return None
    out = found[0]
    for p in found[1:]:
        out = out + p
    return out


def _attention_refusal(node: KernelNode) -> str | None:
    if node.attr("do_rotary", 0) or node.attr("past_present_share_buffer", 0):
        return "do_rotary and past_present_share_buffer are not supported"
    return None


@cpu_kernel("Attention", since=1, domain=DOMAIN, supports=_attention_refusal)
def attention(node: KernelNode) -> KernelFn:
    """Multi-head self-attention with the QKV projection: input [B, S, D] @ weights
    [D, Dq + Dk + Dv] (+ bias); optional mask index, past [2, B, N, P, H] (present out) and
    attention_bias [B or 1, N or 1, S, T]; `unidirectional` masks future keys."""
    heads = int(node.attr("num_heads"))
    sizes = list(node.attr("qkv_hidden_sizes", []) or [])
    causal = bool(node.attr("unidirectional", 0))
    scale_attr = node.attr("scale")
    filter_value = float(node.attr("mask_filter_value", _FILTER))
    n_out = len(node.node.outputs)

    def run(
        x: Array,
        w: Array,
        bias: Array | None = None,
        mask: Array | None = None,
        past: Array | None = None,
        attention_bias: Array | None = None,
        past_sequence_length: Array | None = None,
    ) -> tuple[Any, ...]:
        if x.ndim != 3 or w.ndim != 2 or w.shape[0] != x.shape[2]:
            raise InvalidArgument(
                f"{node.name}: input [B, S, D] and weights [D, 3 * hidden] expected, got "
                f"{x.shape} and {w.shape}"
            )
        dq, dk, dv = sizes if sizes else [w.shape[1] // 3] * 3
        if dq + dk + dv != w.shape[1] or dq != dk or dq % heads or dv % heads:
            raise InvalidArgument(
                f"{node.name}: weights width {w.shape[1]} does not split into q, k, v hidden "
                f"sizes {[dq, dk, dv]} divisible by {heads} heads"
            )
        proj = np.matmul(x, w)
        if bias is not None:
            proj = proj + bias
        q = _heads(proj[..., :dq], heads)
        k = _heads(proj[..., dq : dq + dk], heads)
        v = _heads(proj[..., dq + dk :], heads)
        if past is not None:
            if past.ndim != 5 or past.shape[0] != 2 or past.shape[1:3] != k.shape[:2]:
                raise InvalidArgument(f"{node.name}: past {past.shape} does not fit {k.shape}")
            k = np.concatenate([past[0], k], axis=2)
            v = np.concatenate([past[1], v], axis=2)
        batch, seq = x.shape[:2]
        total = k.shape[2]
        extra = [
            _masks(node, mask, causal, (batch, seq, total - seq, total), filter_value),
            None
            if attention_bias is None
            else _bias_term(node, attention_bias, (batch, heads, seq, total)),
        ]
        scale = float(scale_attr) if scale_attr is not None else 1 / np.sqrt(dq // heads)
        out, _ = _attend(q, k, v, scale, _combine(extra))
        outs: list[Any] = [_merge(out).astype(x.dtype)]
        if n_out > 1:
            outs.append(np.stack([k, v]).astype(x.dtype) if dk == dv else None)
        return tuple(outs)

    return run


def _mha_inputs(
    node: KernelNode, heads: int, q: Array, k: Array | None, v: Array | None, bias: Array | None
) -> tuple[Array, Array, Array]:
    """Q, K, V as [B, N, S, H] from MultiHeadAttention's layouts (K and V given as
    [B, N, L, H] are taken as they are; the bias then applies to Q only)."""
    if q.ndim == 5:  # packed QKV [B, S, N, 3, H]
        if k is not None or v is not None or bias is not None:
            raise InvalidArgument(f"{node.name}: packed QKV takes no key, value or bias")
        qkv = q.transpose(3, 0, 2, 1, 4)
        return qkv[0], qkv[1], qkv[2]
    if q.ndim != 3:
        raise InvalidArgument(f"{node.name}: query must be 3-D or 5-D, got {q.shape}")
    dq = q.shape[2]
    if k is not None and k.ndim == 5:  # packed KV [B, L, N, 2, H]
        if v is not None:
            raise InvalidArgument(f"{node.name}: packed KV takes no value")
        if bias is not None:
            q = q + bias[:dq]
        kv = k.transpose(3, 0, 2, 1, 4)
        return _heads(q, heads), kv[0], kv[1]
    if k is None or v is None:
        raise InvalidArgument(f"{node.name}: key and value are needed with a 3-D query")
    if k.ndim == 4 and v.ndim == 4:  # [B, N, L, H]: already projected and split
        if bias is not None:
            q = q + bias[:dq]
        return _heads(q, heads), k, v
    if k.ndim != 3 or v.ndim != 3 or k.shape[0] != q.shape[0] or k.shape[1] != v.shape[1]:
        raise InvalidArgument(
            f"{node.name}: key {k.shape} and value {v.shape} do not fit query {q.shape}"
        )
    if bias is not None:
        dk = k.shape[2]
        q, k, v = q + bias[:dq], k + bias[dq : dq + dk], v + bias[dq + dk :]
    return _heads(q, heads), _heads(k, heads), _heads(v, heads)


def _mha_refusal(node: KernelNode) -> str | None:
    inputs = node.node.inputs
    if len(inputs) > 9 and inputs[9]:
        return "cache_indirection (beam search) is not supported"
    return None


@cpu_kernel("MultiHeadAttention", since=1, domain=DOMAIN, supports=_mha_refusal)
def multi_head_attention(node: KernelNode) -> KernelFn:
    """Attention over projected Q, K, V (separate, packed QKV/KV, or K/V as [B, N, L, H]),
    with optional bias, key padding mask, attention_bias, past/present key and value, and the
    scaled scores as `qk`."""
    heads = int(node.attr("num_heads"))
    causal = bool(node.attr("unidirectional", 0))
    scale_attr = node.attr("scale")
    filter_value = float(node.attr("mask_filter_value", _FILTER))
    n_out = len(node.node.outputs)

    def run(
        query: Array,
        key: Array | None = None,
        value: Array | None = None,
        bias: Array | None = None,
        key_padding_mask: Array | None = None,
        attention_bias: Array | None = None,
        past_key: Array | None = None,
        past_value: Array | None = None,
        past_sequence_length: Array | None = None,
        cache_indirection: Array | None = None,
    ) -> tuple[Any, ...]:
        q, k, v = _mha_inputs(node, heads, query, key, value, bias)
        if (past_key is None) != (past_value is None):
            raise InvalidArgument(f"{node.name}: past_key and past_value go together")
        past = 0 if past_key is None else past_key.shape[2]
        if past_key is not None and past_value is not None:
            k = np.concatenate([past_key, k], axis=2)
            v = np.concatenate([past_value, v], axis=2)
        batch, _, seq, head = q.shape
        total = k.shape[2]
        extra = [
            _masks(node, key_padding_mask, causal, (batch, seq, past, total), filter_value),
            None
            if attention_bias is None
            else _bias_term(node, attention_bias, (batch, heads, seq, total)),
        ]
        scale = float(scale_attr) if scale_attr is not None else 1 / np.sqrt(head)
        out, scores = _attend(q, k, v, scale, _combine(extra))
        dtype = query.dtype
        outs = (_merge(out).astype(dtype), k.astype(dtype), v.astype(dtype), scores.astype(dtype))
        return outs[:n_out]

    return run


def _rotate(x: Array, cos: Array, sin: Array, interleaved: bool) -> Array:
    """Rotate the first 2 * cos.shape[-1] features of x ([..., S, H]) by angle per position;
    cos and sin are [..., S, R/2]."""
    half = cos.shape[-1]
    rot = x[..., : 2 * half]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :half], rot[..., half:]
    r1 = x1 * cos - x2 * sin
    r2 = x2 * cos + x1 * sin
    rotated = (
        np.stack([r1, r2], axis=-1).reshape(rot.shape)
        if interleaved
        else np.concatenate([r1, r2], axis=-1)
    )
    return np.concatenate([rotated, x[..., 2 * half :]], axis=-1)


def rotary_positions(
    node: KernelNode, position_ids: Array, batch: int, seq: int, cache_len: int
) -> Array:
    """[B, S] positions from position_ids: [B, S] as they are, or one start offset."""
    if position_ids.size == 1:
        pos = np.broadcast_to(int(position_ids.reshape(-1)[0]) + np.arange(seq), (batch, seq))
    elif position_ids.shape == (batch, seq):
        pos = position_ids
    else:
        raise InvalidArgument(
            f"{node.name}: position_ids {position_ids.shape} must be [{batch}, {seq}] or one offset"
        )
    if pos.size and (pos.min() < 0 or pos.max() >= cache_len):
        raise InvalidArgument(
            f"{node.name}: positions must lie in [0, {cache_len}) (the cos/sin cache length)"
        )
    return np.asarray(pos)


def _rotary_refusal(node: KernelNode) -> str | None:
    return "is_packed_batching is not supported" if node.attr("is_packed_batching", 0) else None


@cpu_kernel("RotaryEmbedding", since=1, domain=DOMAIN, supports=_rotary_refusal)
def rotary_embedding(node: KernelNode) -> KernelFn:
    """Rotary position embedding of input [B, S, N*H] or [B, N, S, H] with cos/sin caches
    [max_position, R/2]; the first R features of each head turn (R: rotary_embedding_dim, or
    the head size), in halves or in interleaved pairs."""
    interleaved = bool(node.attr("interleaved", 0))
    heads_attr = int(node.attr("num_heads", 0) or 0)

    def run(x: Array, position_ids: Array, cos_cache: Array, sin_cache: Array) -> tuple[Array]:
        if cos_cache.shape != sin_cache.shape or cos_cache.ndim != 2:
            raise InvalidArgument(
                f"{node.name}: cos_cache {cos_cache.shape} and sin_cache {sin_cache.shape} "
                "must be equal 2-D shapes"
            )
        half = cos_cache.shape[1]
        if x.ndim == 4:  # [B, N, S, H]
            bnsh = x
        elif x.ndim == 3:
            heads = heads_attr or x.shape[2] // (2 * half)
            if not heads or x.shape[2] % heads:
                raise InvalidArgument(f"{node.name}: cannot split {x.shape} into heads")
            bnsh = _heads(x, heads)
        else:
            raise InvalidArgument(f"{node.name}: input must be 3-D or 4-D, got {x.shape}")
        batch, _, seq, head = bnsh.shape
        if 2 * half > head:
            raise InvalidArgument(f"{node.name}: rotary dim {2 * half} exceeds head size {head}")
        pos = rotary_positions(node, position_ids, batch, seq, cos_cache.shape[0])
        cos = cos_cache[pos][:, None]  # [B, 1, S, R/2]
        sin = sin_cache[pos][:, None]
        out = _rotate(bnsh, cos, sin, interleaved).astype(x.dtype)
        return (out if x.ndim == 4 else _merge(out),)

    return run


_GQA_UNSUPPORTED = (
    "head_sink",
    "k_scale",
    "v_scale",
    "q_norm_weight",
    "k_norm_weight",
    "query_seqlens",
)


def _gqa_refusal(node: KernelNode) -> str | None:
    """Why the numpy GroupQueryAttention kernel cannot run a node (features it lacks)."""
    for i, what in enumerate(_GQA_UNSUPPORTED, start=11):
        if len(node.node.inputs) > i and node.node.inputs[i]:
            return f"input {what} is not supported"
    if (
        str(node.attr("k_quant_type", "NONE")) != "NONE"
        or str(node.attr("v_quant_type", "NONE")) != "NONE"
    ):
        return "quantized KV caches are not supported"
    if int(node.attr("smooth_softmax", -1)) > 0 or int(node.attr("qk_output", 0)):
        return "smooth_softmax and qk_output are not supported"
    return None


@cpu_kernel("GroupQueryAttention", since=1, domain=DOMAIN, supports=_gqa_refusal)
def group_query_attention(node: KernelNode) -> KernelFn:
    """Causal attention with fewer K/V heads than query heads (each K/V head serves
    num_heads / kv_num_heads query heads) and a KV cache: the new keys and values go into
    present at each sequence's past length (seqlens_k[b] + 1 - S, or 0 for a first prompt,
    where S equals total_sequence_length); optional rotary embedding of Q and K, local
    window, softcap and attention_bias."""
    heads = int(node.attr("num_heads"))
    kv_heads = int(node.attr("kv_num_heads"))
    scale_attr = node.attr("scale")
    softcap = float(node.attr("softcap", 0.0) or 0.0)
    window = int(node.attr("local_window_size", -1))
    rotary = bool(node.attr("do_rotary", 0))
    interleaved = bool(node.attr("rotary_interleaved", 0))
    if not kv_heads or heads % kv_heads:
        raise InvalidArgument(f"{node.name}: num_heads must be a multiple of kv_num_heads")
    n_out = len(node.node.outputs)

    def run(
        query: Array,
        key: Array | None,
        value: Array | None,
        past_key: Array | None,
        past_value: Array | None,
        seqlens_k: Array,
        total_sequence_length: Array,
        cos_cache: Array | None = None,
        sin_cache: Array | None = None,
        position_ids: Array | None = None,
        attention_bias: Array | None = None,
        *unsupported: Array | None,
    ) -> tuple[Any, ...]:
        batch, seq, width = query.shape
        if key is None:  # packed QKV
            head = width // (heads + 2 * kv_heads)
            q = query[..., : heads * head]
            key = query[..., heads * head : (heads + kv_heads) * head]
            value = query[..., (heads + kv_heads) * head :]
        else:
            head = width // heads
            q = query
            if value is None:
                raise InvalidArgument(f"{node.name}: key needs value")
        qh, kh, vh = _heads(q, heads), _heads(key, kv_heads), _heads(value, kv_heads)
        total = int(np.asarray(total_sequence_length).reshape(-1)[0])
        lengths = np.asarray(seqlens_k).reshape(batch).astype(np.int64) + 1
        first_prompt = seq == total
        past_lens = np.zeros(batch, np.int64) if first_prompt else lengths - seq
        if (past_lens < 0).any() or (lengths > total).any():
            raise InvalidArgument(
                f"{node.name}: seqlens_k {seqlens_k.tolist()} do not fit sequence {seq} of "
                f"total {total}"
            )
        if rotary:
            if cos_cache is None or sin_cache is None:
                raise InvalidArgument(f"{node.name}: do_rotary needs cos_cache and sin_cache")
            if position_ids is not None:
                pos = np.broadcast_to(position_ids, (batch, seq))
            else:
                pos = past_lens[:, None] + np.arange(seq)[None, :]
            pos = np.minimum(pos, cos_cache.shape[0] - 1)
            cos, sin = cos_cache[pos][:, None], sin_cache[pos][:, None]
            qh = _rotate(qh, cos, sin, interleaved)
            kh = _rotate(kh, cos, sin, interleaved)
        buffer = 0 if past_key is None else past_key.shape[2]
        present_len = max(buffer, total)
        present_k = np.zeros((batch, kv_heads, present_len, head), kh.dtype)
        present_v = np.zeros((batch, kv_heads, present_len, head), vh.dtype)
        for b in range(batch):
            p = int(past_lens[b])
            if p:
                if past_key is None or past_value is None or p > buffer:
                    raise InvalidArgument(f"{node.name}: past of {p} needs past_key/past_value")
                present_k[b, :, :p] = past_key[b, :, :p]
                present_v[b, :, :p] = past_value[b, :, :p]
            present_k[b, :, p : p + seq] = kh[b]
            present_v[b, :, p : p + seq] = vh[b]
        group = heads // kv_heads
        k_all = np.repeat(present_k, group, axis=1)
        v_all = np.repeat(present_v, group, axis=1)
        ct = np.float32
        scale = float(scale_attr) if scale_attr else 1 / np.sqrt(head)
        scores = np.matmul(qh.astype(ct), np.swapaxes(k_all.astype(ct), -1, -2)) * ct(scale)
        if softcap > 0:
            scores = ct(softcap) * np.tanh(scores / ct(softcap))
        if attention_bias is not None:
            scores = scores + _bias_term(node, attention_bias, scores.shape)[..., :present_len]
        keys = np.arange(present_len)[None, None, :]
        query_pos = past_lens[:, None, None] + np.arange(seq)[None, :, None]  # [B, S, 1]
        hidden = (keys > query_pos) | (keys >= lengths[:, None, None])
        if window > 0:
            hidden |= keys <= query_pos - window
        scores = np.where(hidden[:, None], -np.inf, scores)
        probs = _softmax(scores)
        out = _merge(np.matmul(probs, v_all.astype(ct))).astype(query.dtype)
        # output_qk: qk_output 0 (the default; other values are refused) outputs nothing
        return (out, present_k, present_v, None)[:n_out]

    return run
