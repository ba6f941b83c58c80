"""GroupQueryAttention (com.microsoft) against onnxruntime's CPU kernel: first prompts (full
and right-padded), decoding and subsequent prompts over a KV cache, packed QKV, rotary
embedding, local window, softcap, float32 and float16."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN

Rng = np.random.Generator
N, KV, H = 4, 2, 16  # onnxruntime's rotary needs a head size that is a multiple of 16
MAX_POS = 32


def _f(rng: Rng, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _case(
    rng: Rng,
    seq: int,
    past: int,
    lengths: list[int],
    dtype: Any = np.float32,
    packed: bool = False,
    rotary: bool = False,
) -> tuple[list[str], list[Any]]:
    total = max(lengths)
    B = len(lengths)  # the batch
    if packed:
        names = ["qkv", "", ""]
        values: list[Any] = [_f(rng, B, seq, (N + 2 * KV) * H, dtype=dtype), None, None]
    else:
        names = ["q", "k", "v"]
        values = [_f(rng, B, seq, N * H, dtype=dtype)]
        values += [_f(rng, B, seq, KV * H, dtype=dtype), _f(rng, B, seq, KV * H, dtype=dtype)]
    if past:
        names += ["pk", "pv"]
        values += [_f(rng, B, KV, past, H, dtype=dtype), _f(rng, B, KV, past, H, dtype=dtype)]
    else:
        names += ["", ""]
        values += [None, None]
    names += ["seqlens_k", "total"]
    values += [np.array(lengths, np.int32) - 1, np.array([total], np.int32)]
    if rotary:
        angles = np.arange(MAX_POS)[:, None] / (10000 ** (np.arange(H // 2) / (H // 2)))
        names += ["cos", "sin"]
        values += [np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)]
    return names, values


def _node(names: list[str], **attrs: Any) -> Any:
    return helper.make_node(
        "GroupQueryAttention",
        names,
        ["y", "present_k", "present_v"],
        domain=DOMAIN,
        num_heads=N,
        kv_num_heads=KV,
        **attrs,
    )


CASES = {
    "prompt": dict(seq=5, past=0, lengths=[5, 5]),
    "padded_prompt": dict(seq=5, past=0, lengths=[5, 3]),
    "decode": dict(seq=1, past=6, lengths=[7, 5]),
    # onnxruntime runs a prompt after a cached context for one sequence only
    "next_prompt": dict(seq=3, past=4, lengths=[7]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("rotary", [False, True])
def test_group_query_attention(contrib_parity: Any, rng: Rng, case: str, rotary: bool) -> None:
    names, values = _case(rng, rotary=rotary, **CASES[case])  # type: ignore[arg-type]
    contrib_parity(_node(names, do_rotary=int(rotary)), values)


@pytest.mark.parametrize("case", ["prompt", "decode"])
def test_group_query_attention_float16(contrib_parity: Any, rng: Rng, case: str) -> None:
    names, values = _case(rng, dtype=np.float16, **CASES[case])  # type: ignore[arg-type]
    contrib_parity(_node(names), values)


def test_group_query_attention_packed_qkv(contrib_parity: Any, rng: Rng) -> None:
    names, values = _case(rng, packed=True, **CASES["next_prompt"])  # type: ignore[arg-type]
    contrib_parity(_node(names), values)


@pytest.mark.parametrize("attrs", [{"local_window_size": 3}, {"softcap": 2.0}, {"scale": 0.3}])
def test_group_query_attention_attributes(
    contrib_parity: Any, rng: Rng, attrs: dict[str, Any]
) -> None:
    names, values = _case(rng, **CASES["next_prompt"])  # type: ignore[arg-type]
    contrib_parity(_node(names, **attrs), values)


def test_group_query_attention_interleaved_rotary(contrib_parity: Any, rng: Rng) -> None:
    names, values = _case(rng, rotary=True, **CASES["decode"])  # type: ignore[arg-type]
    contrib_parity(_node(names, do_rotary=1, rotary_interleaved=1), values)


def test_group_query_attention_refuses_what_it_lacks_at_session_creation(rng: Rng) -> None:
    import turnout
    from turnout.graph.errors import NotImplemented
    from turnout.tools.testing import one_node_model

    names, values = _case(rng, **CASES["prompt"])  # type: ignore[arg-type]
    names += ["", "", "", "", "sink"]  # after cos, sin, position_ids and attention_bias
    values += [None, None, None, None, _f(rng, N)]
    model = one_node_model(_node(names), values, 17)
    with pytest.raises(NotImplemented, match="head_sink is not supported"):
        turnout.InferenceSession(model.SerializeToString())
