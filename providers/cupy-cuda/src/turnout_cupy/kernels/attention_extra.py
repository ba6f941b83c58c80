"""RotaryEmbedding, LinearAttention, FlexAttention and TensorScatter (a KV-cache update) on
`be.xp`.

RotaryEmbedding: the sizes and input checks are `turnout.sdk.semantics.rotary`'s. X is viewed as
(batch, seq, heads, head) without a copy; cos/sin rows are gathered by position_ids on the
device, the ids bounds-checked there (a flagged `InvalidArgument` naming the node, as
Gather's); the rotation is four broadcast multiplies over the pairs, which are strided slices
(interleaved) or the two halves of the rotated part. float16 computes in float32.

LinearAttention: the update rule and checks are `turnout.sdk.semantics.linear_attention`'s. The
state (batch, kv_heads, d_k, d_v) is float32 and steps in time with batched xp ops (decay,
the delta rule's read-back Sᵀk as a batched matvec, the rank-1 write); all query heads of a kv
head read it in one batched matmul, grouped as (batch, kv_heads, group, d_k), so the state is
never repeated per query head. chunk_size (a tuning hint) is not used.

FlexAttention (ai.onnx.preview): sizes, scale and softmax type are
`turnout.sdk.semantics.flex_attention`'s; grouped query heads read their kv head by broadcasting
in the batched matmuls (no repeat). score_mod and prob_mod graphs run as nested graphs of
the session (`KernelNode.subgraph_builder`) on the (batch, q_heads, q_len, kv_len) tensor,
their value types inferred first (the node's shape inference does not type them), so their
nodes can be claimed by type like any other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from turnout.graph.ir import Graph
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.flex_attention import flex_attention_shapes, flex_softmax_dtype
from turnout.sdk.semantics.linear_attention import linear_attention_attrs
from turnout.sdk.semantics.rotary import rotary_shapes
from turnout.sdk.semantics.tensor_scatter import tensor_scatter_mode, tensor_scatter_plan

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []


def _compute(dtype: Any) -> Any:
    return np.dtype(np.float32) if np.dtype(dtype).itemsize < 4 else np.dtype(dtype)


def _shape(v: Any) -> Any:
    return None if v is None else v.shape


@cuda_kernel("RotaryEmbedding", 23, applies=float_only)
def rotary_embedding(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    interleaved = bool(kn.attr("interleaved", 0))
    rot_attr, num_heads = int(kn.attr("rotary_embedding_dim", 0)), int(kn.attr("num_heads", 0))
    pos_name = kn.inputs[3].name if len(kn.inputs) > 3 and kn.inputs[3] is not None else "?"

    def run(x: Any, cos: Any, sin: Any, pos: Any = None) -> tuple[Any]:
        s = rotary_shapes(kn.name, x.shape, cos.shape, sin.shape, _shape(pos), num_heads, rot_attr)
        if pos is not None:
            n = int(s.positions or 0)
            p = pos.astype(np.int64)
            if p.size:
                be.checks.flag(
                    xp.any((p < 0) | (p >= n)),
                    f"RotaryEmbedding node {kn.name!r}: a position in {pos_name!r} is out of "
                    f"range [0, {n - 1}] for caches of {n} rows (checked on the device)",
                )
            p = xp.clip(p, 0, max(n - 1, 0))
            cos, sin = xp.take(cos, p, axis=0), xp.take(sin, p, axis=0)
        ct = _compute(x.dtype)
        c = cos[:, :, None, : s.half].astype(ct)  # (batch | 1, seq | 1, 1, half)
        sn = sin[:, :, None, : s.half].astype(ct)
        if x.ndim == 4:
            xv = x.transpose(0, 2, 1, 3)
        else:
            xv = x.reshape(s.batch, s.seq, s.heads, s.head)
        xv = xv.astype(ct, copy=False)
        if interleaved:
            x1, x2 = xv[..., 0 : s.rot : 2], xv[..., 1 : s.rot : 2]
        else:
            x1, x2 = xv[..., : s.half], xv[..., s.half : s.rot]
        real, imag = c * x1 - sn * x2, sn * x1 + c * x2
        if interleaved:
            turned = xp.stack([real, imag], axis=-1).reshape(*real.shape[:-1], s.rot)
        else:
            turned = xp.concatenate([real, imag], axis=-1)
        y = xp.concatenate([turned, xv[..., s.rot :]], axis=-1).astype(x.dtype, copy=False)
        return (y.transpose(0, 2, 1, 3) if x.ndim == 4 else y.reshape(x.shape),)

    return run


def _heads(x: Any, heads: int) -> Any:
    """(batch, seq, heads * dim) -> (seq, batch, heads, dim) in float32: one step a row."""
    b, t, hd = x.shape
    return x.reshape(b, t, heads, hd // heads).transpose(1, 0, 2, 3).astype(np.float32)


@cuda_kernel("LinearAttention", 27, applies=float_only)
def linear_attention(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    a = linear_attention_attrs(kn)
    hkv = a.kv_heads

    def run(
        q: Any, k: Any, v: Any, past: Any = None, decay: Any = None, beta: Any = None
    ) -> tuple[Any, Any]:
        s = a.shapes(q.shape, k.shape, v.shape, _shape(past), _shape(decay), _shape(beta))
        b, g = s.batch, s.group
        q4 = _heads(q, a.q_heads).reshape(s.steps, b, hkv, g, s.d_k)
        k4, v4 = _heads(k, hkv), _heads(v, hkv)  # (seq, batch, kv_heads, d)
        if past is None:
            state = xp.zeros((b, hkv, s.d_k, s.d_v), np.float32)
        else:
            state = past.astype(np.float32)
        gates = None
        if decay is not None:  # exp(decay) as (seq, batch, kv_heads, d_k | 1, 1)
            per = s.d_k if s.decay_per_key else 1
            gates = xp.exp(_heads(decay, hkv).reshape(s.steps, b, hkv, per, 1))
        betas = None if beta is None else _heads(beta, s.beta_heads)  # (..., heads | 1, 1)
        outs = []
        for t in range(s.steps):
            kt, vt = k4[t], v4[t]
            if gates is not None:
                state = state * gates[t]
            if betas is not None:
                back = xp.matmul(kt[:, :, None, :], state)[:, :, 0, :]  # Sᵀk: (b, h, d_v)
                vt = betas[t] * (vt - back)
            state = state + kt[..., :, None] * vt[..., None, :]
            outs.append(xp.matmul(q4[t], state))  # (b, kv_heads, group, d_v)
        y = xp.stack(outs, axis=1) if outs else xp.zeros((b, 0, hkv, g, s.d_v), np.float32)
        y = (s.scale * y).reshape(b, s.steps, a.q_heads * s.d_v).astype(q.dtype)
        return y, state.astype(q.dtype if past is None else past.dtype)

    return run


def _typed_subgraph(kn: KernelNode, attr: str, dtype: Any) -> Any:
    """A runnable for a mod graph with its value types inferred: the graph declares no types
    for its intermediate values (the node's own shape inference does not enter it), and
    kernels that claim by type need them. Its input is the scores tensor in `dtype`."""
    graph = kn.attr(attr)
    proto = onnx.GraphProto()
    proto.CopyFrom(graph.proto)
    if proto.input:
        proto.input[0].type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(dtype)
    opsets = [helper.make_opsetid(d, v) for d, v in graph.opsets.items()]
    model = helper.make_model(proto, opset_imports=opsets)
    try:
        typed = onnx.shape_inference.infer_shapes(model).graph
    except onnx.shape_inference.InferenceError:  # keep the graph as given; nodes may decline
        typed = proto
    builder = kn.subgraph_builder
    if builder is None:
        return kn.subgraph(attr)  # raises: no session to build it in
    return builder(Graph.from_proto(typed, graph.opsets, parent=graph.parent))


def _flex_applies(kn: KernelNode) -> str | None:
    precision = kn.attr("softmax_precision")
    if precision is not None and int(precision) == 16:
        return "CuPy has no bfloat16 arrays (softmax_precision)"
    return float_only(kn)


@cuda_kernel("FlexAttention", 1, domain="ai.onnx.preview", applies=_flex_applies)
def flex_attention(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    scale_attr, precision = kn.attr("scale"), kn.attr("softmax_precision")
    # score_mod / prob_mod graphs run through the session (`KernelNode.subgraph`), on the
    # providers that claim their nodes, with the (batch, q_heads, q_len, kv_len) tensor
    ct_build = np.dtype(flex_softmax_dtype(kn.name, kn.inputs[0].dtype, precision))
    mods = {
        m: _typed_subgraph(kn, m, ct_build)
        for m in ("score_mod", "prob_mod")
        if kn.attr(m) is not None
    }

    def modded(name: str, t: Any, s: Any, ct: Any) -> Any:
        if name not in mods:
            return t
        four = t.reshape(s.batch, s.q_heads, s.q_len, s.kv_len)
        (out,) = mods[name]([four], {})
        return out.astype(ct, copy=False).reshape(t.shape)

    def run(q: Any, k: Any, v: Any) -> tuple[Any]:
        s = flex_attention_shapes(kn.name, q.shape, k.shape, v.shape, scale_attr)
        ct = np.dtype(flex_softmax_dtype(kn.name, q.dtype, precision))
        root = q.dtype.type(np.sqrt(np.float32(s.scale)))  # Q and K each scaled by its root
        q5 = (q * root).reshape(s.batch, s.kv_heads, s.group, s.q_len, s.head)
        k5 = (k * root)[:, :, None]  # (batch, kv_heads, 1, kv_len, head)
        scores = modded("score_mod", xp.matmul(q5, xp.swapaxes(k5, -1, -2)).astype(ct), s, ct)
        e = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
        p = modded("prob_mod", e / xp.sum(e, axis=-1, keepdims=True), s, ct)
        y = xp.matmul(p, v[:, :, None].astype(ct))
        return (y.reshape(s.batch, s.q_heads, s.q_len, s.v_head).astype(v.dtype),)

    return run


@cuda_kernel("TensorScatter", 24)
def tensor_scatter(kn: KernelNode, be: Backend) -> KernelFn:
    """A KV-cache update: the update's rows are written into a copy of the cache along the
    axis (moved next to the batch axis as a view) by one advanced-index assignment at
    write_indices[b] + s; in linear mode a row past the cache's end is flagged on the device
    (an `InvalidArgument` naming the node) and not written."""
    xp = be.xp
    mode = tensor_scatter_mode(kn)
    axis = int(kn.attr("axis", -2))

    def run(cache: Any, update: Any, write: Any = None) -> tuple[Any]:
        p = tensor_scatter_plan(kn.name, cache.shape, update.shape, _shape(write), axis)
        batch = cache.shape[0]
        start = xp.zeros(batch, np.int64) if write is None else write.astype(np.int64)
        pos = start[:, None] + xp.arange(p.update_len)  # (batch, update_len)
        if mode == "circular":
            pos = pos % p.cache_len
        elif batch and p.update_len:
            be.checks.flag(
                xp.any((pos < 0) | (pos >= p.cache_len)),
                f"TensorScatter node {kn.name!r}: write_indices put an update row outside "
                f"the cache of {p.cache_len} along axis {p.axis} (checked on the device)",
            )
            pos = xp.clip(pos, 0, p.cache_len - 1)
        present = cache.copy()
        view = xp.moveaxis(present, p.axis, 1)
        view[xp.arange(batch)[:, None], pos] = xp.moveaxis(update, p.axis, 1)
        return (present,)

    return run
