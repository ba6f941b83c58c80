"""Attention ops that onnxruntime's transformer optimizer and model builder emit: Attention
(input projection included), MultiHeadAttention, GroupQueryAttention and RotaryEmbedding."""

from __future__ import annotations

from turnout.graph.contrib.inference import Dim, NodeTypes, TensorType, same_as
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_T = ("float", "float16", "bfloat16")
_M = ("int32",)


def _add(a: Dim, b: Dim) -> Dim:
    return a + b if isinstance(a, int) and isinstance(b, int) else None


def _mul(a: Dim, b: Dim) -> Dim:
    return a * b if isinstance(a, int) and isinstance(b, int) else None


def _div(a: Dim, b: int) -> Dim:
    return a // b if isinstance(a, int) and b else None


def _attention(types: NodeTypes) -> list[TensorType | None]:
    x, w, past = types.input(0), types.input(1), types.input(4)
    if x is None or x.rank != 3:
        return [None, None]
    heads = int(types.attr("num_heads", 1))
    sizes = list(types.attr("qkv_hidden_sizes", []) or [])
    width = w.dim(1) if w is not None else None
    if sizes:
        q_hidden, v_hidden = sizes[0], sizes[2]
    elif isinstance(width, int):
        q_hidden = v_hidden = width // 3
    else:
        q_hidden = v_hidden = None
    batch, seq = x.dim(0), x.dim(1)
    out = TensorType(x.elem_type, (batch, seq, v_hidden))
    past_len: Dim = 0 if past is None else past.dim(3)
    head = q_hidden // heads if isinstance(q_hidden, int) and heads else None
    present = TensorType(x.elem_type, (2, batch, heads, _add(past_len, seq), head))
    return [out, present]


define(
    OpSpec(
        "Attention",
        (
            Arg("input", "T"),
            Arg("weights", "T"),
            Arg("bias", "T", optional=True),
            Arg("mask_index", "M", optional=True),
            Arg("past", "T", optional=True),
            Arg("attention_bias", "T", optional=True),
            Arg("past_sequence_length", "M", optional=True),
        ),
        (Arg("output", "T"), Arg("present", "T", optional=True)),
        {"T": _T, "M": _M},
        _attention,
        attrs=(
            Attr("num_heads", "int", required=True),
            Attr("qkv_hidden_sizes", "ints"),
            Attr("unidirectional", "int", 0),
            Attr("scale", "float"),
            Attr("mask_filter_value", "float"),
            Attr("do_rotary", "int"),
            Attr("rotary_embedding_dim", "int"),
            Attr("past_present_share_buffer", "int"),
        ),
    )
)


def _multi_head(types: NodeTypes) -> list[TensorType | None]:
    q, k, v, past = types.input(0), types.input(1), types.input(2), types.input(6)
    heads = int(types.attr("num_heads", 1))
    if q is None or q.rank not in (3, 5):
        return [None, None, None, None]
    batch, seq = q.dim(0), q.dim(1)
    if q.rank == 5:  # packed QKV [B, S, N, 3, H]
        head_v: Dim = q.dim(4)
        kv_len: Dim = seq
    elif k is not None and k.rank == 5:  # packed KV [B, L, N, 2, H]
        head_v, kv_len = k.dim(4), k.dim(1)
    elif v is not None and v.rank == 4:  # key and value already [B, N, L, H]
        head_v, kv_len = v.dim(3), v.dim(2)
    elif v is not None and v.rank == 3:
        head_v = _div(v.dim(2), heads)
        kv_len = v.dim(1)
    else:
        return [None, None, None, None]
    head_k = _div(q.dim(2), heads) if q.rank == 3 else q.dim(-1)
    out = TensorType(q.elem_type, (batch, seq, _mul(heads, head_v)))
    past_len: Dim = 0 if past is None else past.dim(2)
    total = _add(past_len, kv_len)
    present_k = TensorType(q.elem_type, (batch, heads, total, head_k))
    present_v = TensorType(q.elem_type, (batch, heads, total, head_v))
    return [out, present_k, present_v, TensorType(q.elem_type, (batch, heads, seq, total))]


define(
    OpSpec(
        "MultiHeadAttention",
        (
            Arg("query", "T"),
            Arg("key", "T", optional=True),
            Arg("value", "T", optional=True),
            Arg("bias", "T", optional=True),
            Arg("key_padding_mask", "M", optional=True),
            Arg("attention_bias", "T", optional=True),
            Arg("past_key", "T", optional=True),
            Arg("past_value", "T", optional=True),
            Arg("past_sequence_length", "M", optional=True),
            Arg("cache_indirection", "M", optional=True),
        ),
        (
            Arg("output", "T"),
            Arg("present_key", "T", optional=True),
            Arg("present_value", "T", optional=True),
            Arg("qk", "QK", optional=True),
        ),
        {"T": _T, "QK": _T, "M": _M},
        _multi_head,
        attrs=(
            Attr("num_heads", "int", required=True),
            Attr("unidirectional", "int", 0),
            Attr("scale", "float"),
            Attr("mask_filter_value", "float"),
        ),
    )
)

define(
    OpSpec(
        "RotaryEmbedding",
        (
            Arg("input", "T"),
            Arg("position_ids", "M"),
            Arg("cos_cache", "T"),
            Arg("sin_cache", "T"),
        ),
        (Arg("output", "T"),),
        {"T": _T, "M": ("int64",)},
        same_as(0),
        attrs=(
            Attr("interleaved", "int"),
            Attr("num_heads", "int"),
            Attr("rotary_embedding_dim", "int"),
            Attr("is_packed_batching", "int"),
            Attr("scale", "float"),
        ),
    )
)


def _group_query(types: NodeTypes) -> list[TensorType | None]:
    q, k, past = types.input(0), types.input(1), types.input(3)
    heads = int(types.attr("num_heads", 1))
    kv_heads = int(types.attr("kv_num_heads", 1))
    if q is None or q.rank != 3:
        return [None, None, None, None]
    width = q.dim(2)
    if k is None:  # packed QKV: num_heads + 2 * kv_num_heads heads
        head = width // (heads + 2 * kv_heads) if isinstance(width, int) else None
    else:
        head = width // heads if isinstance(width, int) else None
    out = TensorType(q.elem_type, (q.dim(0), q.dim(1), _mul(heads, head)))
    cache = past.elem_type if past is not None else q.elem_type
    present = TensorType(cache, (q.dim(0), kv_heads, None, head))
    return [out, present, present, None]


define(
    OpSpec(
        "GroupQueryAttention",
        (
            Arg("query", "T"),
            Arg("key", "T", optional=True),
            Arg("value", "T", optional=True),
            Arg("past_key", "T_CACHE", optional=True),
            Arg("past_value", "T_CACHE", optional=True),
            Arg("seqlens_k", "M"),
            Arg("total_sequence_length", "M"),
            Arg("cos_cache", "T", optional=True),
            Arg("sin_cache", "T", optional=True),
            Arg("position_ids", "tensor(int64)", optional=True),
            Arg("attention_bias", "T", optional=True),
            Arg("head_sink", "T", optional=True),
            Arg("k_scale", "T_KV_SCALE", optional=True),
            Arg("v_scale", "T_KV_SCALE", optional=True),
            Arg("q_norm_weight", "T", optional=True),
            Arg("k_norm_weight", "T", optional=True),
            Arg("query_seqlens", "M", optional=True),
        ),
        (
            Arg("output", "T"),
            Arg("present_key", "T_CACHE", optional=True),
            Arg("present_value", "T_CACHE", optional=True),
            Arg("output_qk", "T", optional=True),
        ),
        {
            "T": ("float16", "bfloat16", "float"),
            "T_CACHE": ("float", "float16", "bfloat16", "uint8", "int8", "float8e4m3fn"),
            "T_KV_SCALE": ("float",),
            "M": _M,
        },
        _group_query,
        attrs=(
            Attr("num_heads", "int", required=True),
            Attr("kv_num_heads", "int", required=True),
            Attr("scale", "float"),
            Attr("softcap", "float"),
            Attr("local_window_size", "int", -1),
            Attr("do_rotary", "int"),
            Attr("rotary_interleaved", "int"),
            Attr("smooth_softmax", "int", -1),
            Attr("causal", "int", 1),
            Attr("qk_output", "int", 0),
            Attr("sliding_window_cache", "int", 0),
            Attr("k_quant_type", "string", "NONE"),
            Attr("v_quant_type", "string", "NONE"),
            Attr("kv_cache_bit_width", "int"),
            Attr("qk_norm_epsilon", "float", 1e-6),
            Attr("q_norm_epsilon", "float"),
            Attr("k_norm_epsilon", "float"),
        ),
    )
)
