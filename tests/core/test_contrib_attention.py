"""Attention, MultiHeadAttention and RotaryEmbedding (com.microsoft) against onnxruntime's CPU
kernels: mask layouts, past/present, causal, attention_bias, packed inputs, optional inputs
present and absent, optional outputs requested. onnxruntime's CPU provider runs Attention and
MultiHeadAttention in float32 only: their float16 cases hold turnout to onnxruntime's float32
result on the same inputs (`float32_oracle`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN

Rng = np.random.Generator
B, S, N, H = 2, 4, 2, 8
D = N * H


def _f(rng: Rng, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _node(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    return helper.make_node(op, inputs, outputs, domain=DOMAIN, **attrs)


def _masks(past: int) -> dict[str, np.ndarray | None]:
    total = past + S
    raw = np.ones((B, total), np.int32)
    raw[1, -2:] = 0
    return {
        "none": None,
        "lengths": np.array([total, total - 1], np.int32),
        "ends_starts": np.array([total, total - 1, 0, 1], np.int32),
        "raw2d": raw,
        "raw3d": np.broadcast_to(raw[:, None], (B, S, total)).copy(),
    }


@pytest.mark.parametrize("mask", ["none", "lengths", "ends_starts", "raw2d", "raw3d"])
@pytest.mark.parametrize("past", [0, 3])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention(
    contrib_parity: Any, rng: Rng, mask: str, past: int, unidirectional: int
) -> None:
    m = _masks(past)[mask]
    inputs = [_f(rng, B, S, D), _f(rng, D, 3 * D) * 0.3, _f(rng, 3 * D), m]
    names = ["x", "w", "b", "m" if m is not None else ""]
    if past:
        names.append("past")
        inputs.append(_f(rng, 2, B, N, past, H))
    outputs = ["y", "present"] if past else ["y"]
    node = _node("Attention", names, outputs, num_heads=N, unidirectional=unidirectional)
    got = contrib_parity(node, inputs[: len(names)])
    if past:
        assert got[1].shape == (2, B, N, past + S, H)


def test_attention_present_without_past(contrib_parity: Any, rng: Rng) -> None:
    node = _node("Attention", ["x", "w"], ["y", "present"], num_heads=N)
    _, present = contrib_parity(node, [_f(rng, B, S, D), _f(rng, D, 3 * D) * 0.3])
    assert present.shape == (2, B, N, S, H)


def test_attention_bias_scale_and_hidden_sizes(contrib_parity: Any, rng: Rng) -> None:
    dv = 2 * D
    inputs = [
        _f(rng, B, S, D),
        _f(rng, D, 2 * D + dv) * 0.3,
        _f(rng, 2 * D + dv),
        None,
        None,
        _f(rng, 1, N, S, S),
    ]
    node = _node(
        "Attention",
        ["x", "w", "b", "", "", "ab"],
        ["y"],
        num_heads=N,
        qkv_hidden_sizes=[D, D, dv],
        scale=0.2,
    )
    (y,) = contrib_parity(node, inputs)
    assert y.shape == (B, S, dv)


def test_attention_mask_filter_value(contrib_parity: Any, rng: Rng) -> None:
    m = _masks(0)["raw2d"]
    node = _node("Attention", ["x", "w", "", "m"], ["y"], num_heads=N, mask_filter_value=-3.0)
    contrib_parity(node, [_f(rng, B, S, D), _f(rng, D, 3 * D) * 0.3, None, m])


def _mha_inputs(rng: Rng, layout: str, kv_len: int) -> tuple[list[str], list[Any]]:
    q = _f(rng, B, S, D)
    if layout == "separate":
        return ["q", "k", "v"], [q, _f(rng, B, kv_len, D), _f(rng, B, kv_len, D)]
    if layout == "packed_kv":
        return ["q", "kv"], [q, _f(rng, B, kv_len, N, 2, H)]
    if layout == "bnsh_kv":
        return ["q", "k", "v"], [q, _f(rng, B, N, kv_len, H), _f(rng, B, N, kv_len, H)]
    return ["qkv"], [_f(rng, B, S, N, 3, H)]


def _as_separate(layout: str, inputs: list[Any]) -> list[Any]:
    """The packed layouts' inputs as separate [B, S, D] query, key and value."""
    if layout == "packed_qkv":
        qkv = inputs[0]  # [B, S, N, 3, H]
        return [qkv[:, :, :, i].reshape(B, S, D) for i in range(3)]
    kv = inputs[1]  # [B, L, N, 2, H]
    return [inputs[0], *(kv[:, :, :, i].reshape(B, kv.shape[1], D) for i in range(2))]


@pytest.mark.parametrize("layout", ["separate", "bnsh_kv"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_multi_head_attention_layouts(
    contrib_parity: Any, rng: Rng, layout: str, with_bias: bool
) -> None:
    names, inputs = _mha_inputs(rng, layout, 5)
    if with_bias:
        names.append("bias")
        inputs.append(_f(rng, 3 * D))
    node = _node("MultiHeadAttention", names, ["y"], num_heads=N)
    contrib_parity(node, inputs)


@pytest.mark.parametrize("layout", ["packed_kv", "packed_qkv"])
def test_multi_head_attention_packed_layouts(contrib_parity: Any, rng: Rng, layout: str) -> None:
    """onnxruntime's CPU kernel refuses packed QKV and KV ("not implemented for CPU"): the
    oracle is onnxruntime on the same data as separate query, key and value."""
    from turnout.tools.testing import run_onnxruntime

    names, inputs = _mha_inputs(rng, layout, 5)
    node = _node("MultiHeadAttention", names, ["y"], num_heads=N)
    separate = _node("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=N)
    contrib_parity(
        node,
        inputs,
        reference=lambda *_: run_onnxruntime(separate, _as_separate(layout, inputs), 17),
    )


def test_multi_head_attention_bnsh_kv_with_past(contrib_parity: Any, rng: Rng) -> None:
    names, inputs = _mha_inputs(rng, "bnsh_kv", 5)
    names += ["", "", "", "pk", "pv"]
    inputs += [None, None, None, _f(rng, B, N, 3, H), _f(rng, B, N, 3, H)]
    node = _node("MultiHeadAttention", names, ["y", "pk_out", "pv_out"], num_heads=N)
    _, pk, _ = contrib_parity(node, inputs)
    assert pk.shape == (B, N, 8, H)


def test_multi_head_attention_qk_output(contrib_parity: Any, rng: Rng) -> None:
    names, inputs = _mha_inputs(rng, "separate", 5)
    node = _node("MultiHeadAttention", names, ["y", "", "", "qk"], num_heads=N)
    _, qk = contrib_parity(node, inputs)
    assert qk.shape == (B, N, S, 5)


@pytest.mark.parametrize("mask", ["lengths", "raw2d"])
@pytest.mark.parametrize("past", [0, 3])
def test_multi_head_attention_mask_past_present_qk(
    contrib_parity: Any, rng: Rng, mask: str, past: int
) -> None:
    m = _masks(past)[mask]
    names = ["q", "k", "v", "b", "m", "ab"]
    inputs: list[Any] = [_f(rng, B, S, D), _f(rng, B, S, D), _f(rng, B, S, D), _f(rng, 3 * D)]
    inputs += [m, _f(rng, B, 1, S, past + S)]
    if past:
        names += ["pk", "pv"]
        inputs += [_f(rng, B, N, past, H), _f(rng, B, N, past, H)]
    node = _node("MultiHeadAttention", names, ["y", "present_k", "present_v"], num_heads=N)
    _, pk, pv = contrib_parity(node, inputs)
    assert pk.shape == pv.shape == (B, N, past + S, H)


@pytest.mark.parametrize("kv_len", [S, S + 2])
def test_multi_head_attention_unidirectional_and_scale(
    contrib_parity: Any, rng: Rng, kv_len: int
) -> None:
    names, inputs = _mha_inputs(rng, "separate", kv_len)
    node = _node("MultiHeadAttention", names, ["y"], num_heads=N, unidirectional=1, scale=0.5)
    contrib_parity(node, inputs)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
@pytest.mark.parametrize("positions", ["offset", "full"])
@pytest.mark.parametrize("partial", [False, True])
def test_rotary_embedding(
    contrib_parity: Any,
    rng: Rng,
    dtype: Any,
    interleaved: int,
    layout: str,
    positions: str,
    partial: bool,
) -> None:
    rot = H // 2 if partial else H
    max_pos = 16
    angles = np.arange(max_pos)[:, None] / (10000 ** (np.arange(rot // 2) / (rot // 2)))
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    x = _f(rng, B, S, D, dtype=dtype) if layout == "bsd" else _f(rng, B, N, S, H, dtype=dtype)
    pos = (
        np.array([3], np.int64)
        if positions == "offset"
        else rng.integers(0, max_pos, (B, S)).astype(np.int64)
    )
    attrs: dict[str, Any] = {"interleaved": interleaved}
    if partial:
        attrs.update(rotary_embedding_dim=rot, num_heads=N)
    node = _node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], **attrs)
    contrib_parity(node, [x, pos, cos, sin])


@pytest.mark.parametrize(
    ("op", "attrs", "reason"),
    [
        ("Attention", {"do_rotary": 1}, "do_rotary"),
        ("RotaryEmbedding", {"is_packed_batching": 1}, "is_packed_batching"),
    ],
)
def test_unsupported_attributes_are_refused_at_session_creation(
    rng: Rng, op: str, attrs: dict[str, Any], reason: str
) -> None:
    import turnout
    from turnout.graph.errors import NotImplemented
    from turnout.tools.testing import one_node_model

    if op == "Attention":
        names, values = ["x", "w"], [_f(rng, B, S, D), _f(rng, D, 3 * D)]
        attrs["num_heads"] = N
    else:
        names = ["x", "pos", "cos", "sin"]
        values = [_f(rng, B, S, D), np.zeros(1, np.int64), _f(rng, 8, H // 2), _f(rng, 8, H // 2)]
    model = one_node_model(_node(op, names, ["y"], **attrs), values, 17)
    with pytest.raises(NotImplemented, match=reason):
        turnout.InferenceSession(model.SerializeToString())


def test_attention_float16(contrib_parity: Any, float32_oracle: Any, rng: Rng) -> None:
    m = _masks(2)["raw2d"]
    inputs = [
        _f(rng, B, S, D, dtype=np.float16),
        (_f(rng, D, 3 * D) * 0.3).astype(np.float16),
        _f(rng, 3 * D, dtype=np.float16),
        m,
        _f(rng, 2, B, N, 2, H, dtype=np.float16),
    ]
    node = _node("Attention", ["x", "w", "b", "m", "past"], ["y", "present"], num_heads=N)
    contrib_parity(node, inputs, reference=float32_oracle(node, inputs))


def test_multi_head_attention_float16(contrib_parity: Any, float32_oracle: Any, rng: Rng) -> None:
    names, inputs = _mha_inputs(rng, "separate", 5)
    inputs = [x.astype(np.float16) for x in inputs] + [_f(rng, 3 * D, dtype=np.float16)]
    node = _node("MultiHeadAttention", [*names, "b"], ["y"], num_heads=N, unidirectional=1)
    contrib_parity(node, inputs, reference=float32_oracle(node, inputs))


@pytest.mark.parametrize("past", [0, 2])
def test_attention_4d_causal_mask(contrib_parity: Any, rng: Rng, past: int) -> None:
    """onnxruntime's CPU kernel refuses a 4-D mask [B, 1, M, M] (rows past..past+S-1 apply):
    a lower-triangular one is a causal mask, so the oracle is onnxruntime with
    `unidirectional=1` and no mask."""
    from turnout.tools.testing import run_onnxruntime

    m = np.tril(np.ones((8, 8), np.int32))[None, None].repeat(B, 0)
    inputs = [_f(rng, B, S, D), _f(rng, D, 3 * D) * 0.3, None, m]
    names = ["x", "w", "", "m"]
    plain = [inputs[0], inputs[1]]
    plain_names = ["x", "w"]
    if past:
        inputs.append(_f(rng, 2, B, N, past, H))
        names.append("past")
        plain += [None, None, inputs[-1]]
        plain_names += ["", "", "past"]
    outputs = ["y", "present"] if past else ["y"]  # onnxruntime wants present with a past
    node = _node("Attention", names, outputs, num_heads=N)
    causal = _node("Attention", plain_names, outputs, num_heads=N, unidirectional=1)
    contrib_parity(node, inputs, reference=lambda *_: run_onnxruntime(causal, plain, 17))
