"""RotaryEmbedding, LinearAttention and CausalConvWithState on the emulated backend, against
onnx.reference, over what the ONNX node cases leave out (float16, grouped heads, per-key
decay, a past state, a 3-D cache that broadcasts), and their errors: a position id outside the
cache (checked on the device), inputs the update rule forbids, a bad weight shape."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import Graph
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics.causal_conv import causal_conv_shapes
from turnout.sdk.semantics.flex_attention import flex_attention_shapes
from turnout.sdk.semantics.linear_attention import linear_attention_attrs


def _rope_feeds(dtype: Any, rng: np.random.Generator, three_d_cache: bool) -> dict[str, Any]:
    x = rng.standard_normal((2, 3, 5, 8)).astype(dtype)  # (batch, heads, seq, head)
    if three_d_cache:  # per (batch, seq), batch broadcast
        cos = rng.standard_normal((1, 5, 3)).astype(dtype)
        return {"x": x, "cos": cos, "sin": rng.standard_normal((1, 5, 3)).astype(dtype)}
    cos = rng.standard_normal((9, 3)).astype(dtype)
    pos = rng.integers(0, 9, (2, 5)).astype(np.int64)
    return {"x": x, "cos": cos, "sin": rng.standard_normal((9, 3)).astype(dtype), "pos": pos}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("three_d_cache", [False, True])
def test_rotary_partial_dims(node_check: Any, dtype: Any, interleaved: int, three_d_cache: bool):
    feeds = _rope_feeds(dtype, np.random.default_rng(3), three_d_cache)
    node = helper.make_node(
        "RotaryEmbedding",
        list(feeds),
        ["y"],
        rotary_embedding_dim=6,
        interleaved=interleaved,
    )
    node_check.against_reference(node, feeds, 23, 1e-3 if dtype == np.float16 else 1e-6)


def test_rotary_position_out_of_range(node_check: Any) -> None:
    feeds = _rope_feeds(np.float32, np.random.default_rng(0), False)
    feeds["pos"][1, 2] = 9  # the caches have 9 rows
    node = helper.make_node("RotaryEmbedding", list(feeds), ["y"], name="rope0")
    node.attribute.append(helper.make_attribute("rotary_embedding_dim", 6))
    sess = node_check.session(node, feeds, 23)
    with pytest.raises(InvalidArgument, match=r"'rope0': a position in 'pos' is out of range"):
        sess.run(None, feeds)


LA_CASES = [
    ("linear", 4, 2, False, False),
    ("gated", 4, 2, True, False),  # decay per key dimension
    ("gated", 2, 2, False, True),  # decay per head, a past state
    ("delta", 6, 2, False, True),
    ("gated_delta", 4, 1, True, True),
]


@pytest.mark.parametrize(("rule", "hq", "hkv", "per_key", "past"), LA_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_linear_attention(
    node_check: Any, rule: str, hq: int, hkv: int, per_key: bool, past: bool, dtype: Any
) -> None:
    rng = np.random.default_rng(5)
    b, t, dk, dv = 2, 4, 3, 5
    feeds: dict[str, Any] = {
        "q": rng.standard_normal((b, t, hq * dk)).astype(dtype),
        "k": (0.5 * rng.standard_normal((b, t, hkv * dk))).astype(dtype),
        "v": rng.standard_normal((b, t, hkv * dv)).astype(dtype),
    }
    names = ["q", "k", "v", "", "", ""]
    if past:
        feeds["s"] = rng.standard_normal((b, hkv, dk, dv)).astype(dtype)
        names[3] = "s"
    if "gated" in rule:
        width = hkv * dk if per_key else hkv
        feeds["g"] = (-np.abs(rng.standard_normal((b, t, width)))).astype(dtype)
        names[4] = "g"
    if "delta" in rule:
        feeds["beta"] = rng.uniform(0, 1, (b, t, 1)).astype(dtype)
        names[5] = "beta"
    node = helper.make_node(
        "LinearAttention",
        names,
        ["y", "state"],
        update_rule=rule,
        q_num_heads=hq,
        kv_num_heads=hkv,
    )
    node_check.against_reference(node, feeds, 27, 5e-3 if dtype == np.float16 else 1e-5)


def test_linear_attention_bad_inputs() -> None:
    """The shared checks the kernel runs (onnx's shape inference refuses these statically)."""
    node = helper.make_node(
        "LinearAttention", ["q", "k", "v"], ["y", "s"], update_rule="linear", name="la1"
    )
    node.attribute.extend(
        [helper.make_attribute("q_num_heads", 2), helper.make_attribute("kv_num_heads", 2)]
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("q", "k", "v")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "s")],
    )
    kn = KernelNode(Graph.from_proto(graph, {"": 27}).nodes[0], 27, 27)
    attrs = linear_attention_attrs(kn)
    with pytest.raises(InvalidArgument, match="la1: update_rule 'linear' forbids the decay"):
        attrs.shapes((1, 2, 4), (1, 2, 4), (1, 2, 4), None, (1, 2, 2))
    with pytest.raises(InvalidArgument, match="la1: past_state"):
        attrs.shapes((1, 2, 4), (1, 2, 4), (1, 2, 4), (1, 2, 2, 3))


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_causal_conv(node_check: Any, k: int, dtype: Any) -> None:
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.standard_normal((2, 4, 6)).astype(dtype),
        "w": rng.standard_normal((4, 1, k)).astype(dtype),
        "b": rng.standard_normal(4).astype(dtype),
        "s": rng.standard_normal((2, 4, k - 1)).astype(dtype),
    }
    node = helper.make_node("CausalConvWithState", list(feeds), ["y", "state"], activation="silu")
    node_check.against_reference(node, feeds, 27, 2e-3 if dtype == np.float16 else 1e-6)


def test_causal_conv_bad_shapes() -> None:
    """Shape inference refuses these in a model with static shapes; with symbolic dimensions
    the kernel's check (the shared semantics) is what catches them at run time."""
    with pytest.raises(InvalidArgument, match=r"cc: weight \(4, 2, 3\) must be"):
        causal_conv_shapes("cc", (2, 4, 6), (4, 2, 3))
    with pytest.raises(InvalidArgument, match=r"cc: past_state \(2, 4, 3\) must be \(2, 4, 2\)"):
        causal_conv_shapes("cc", (2, 4, 6), (4, 1, 3), None, (2, 4, 3))


@pytest.mark.parametrize("precision", [None, int(TensorProto.DOUBLE)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_flex_attention_gqa(node_check: Any, precision: int | None, dtype: Any) -> None:
    """ai.onnx.preview cases are not in test_emulated_kernels' default-domain list."""
    rng = np.random.default_rng(2)
    feeds = {
        "q": rng.standard_normal((2, 6, 3, 4)).astype(dtype),
        "k": rng.standard_normal((2, 2, 5, 4)).astype(dtype),
        "v": rng.standard_normal((2, 2, 5, 7)).astype(dtype),
    }
    node = helper.make_node("FlexAttention", list(feeds), ["y"], domain="ai.onnx.preview")
    node.attribute.append(helper.make_attribute("scale", 0.3))
    if precision is not None:
        node.attribute.append(helper.make_attribute("softmax_precision", precision))
    opsets = {"": 26, "ai.onnx.preview": 1}
    node_check.against_reference(node, feeds, opsets, 2e-3 if dtype == np.float16 else 1e-6)


def test_flex_attention_bad_heads() -> None:
    with pytest.raises(InvalidArgument, match="fa: 6 query heads are not a multiple of 4"):
        flex_attention_shapes("fa", (1, 6, 2, 4), (1, 4, 3, 4), (1, 4, 3, 4), None)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 2, 1])
@pytest.mark.parametrize("indices", [True, False])
def test_tensor_scatter(node_check: Any, mode: str, axis: int, indices: bool) -> None:
    rng = np.random.default_rng(13)
    cache = rng.standard_normal((3, 4, 6, 2)).astype(np.float32)
    ushape = list(cache.shape)
    ushape[axis] = 2
    feeds = {"cache": cache, "update": rng.standard_normal(ushape).astype(np.float32)}
    if indices:  # circular wraps past the end; linear stays inside
        feeds["w"] = np.array([0, 2, cache.shape[axis] - (1 if mode == "circular" else 2)])
    node = helper.make_node("TensorScatter", list(feeds), ["present"], mode=mode, axis=axis)
    node_check.against_reference(node, feeds, 24, 0)


def test_tensor_scatter_linear_overflow(node_check: Any) -> None:
    rng = np.random.default_rng(0)
    feeds = {
        "cache": rng.standard_normal((2, 5, 3)).astype(np.float32),
        "update": rng.standard_normal((2, 2, 3)).astype(np.float32),
        "w": np.array([1, 4], np.int64),  # rows 4 and 5 of a cache of 5
    }
    node = helper.make_node("TensorScatter", list(feeds), ["present"], name="kv0")
    node.attribute.append(helper.make_attribute("axis", 1))
    sess = node_check.session(node, feeds, 24)
    with pytest.raises(InvalidArgument, match=r"'kv0': write_indices put an update row outside"):
        sess.run(None, feeds)


def _mod_graph(name: str, op: str, constant: Any) -> Any:
    """A one-node mod graph: `op`(its input, an initializer) over (batch, heads, q, kv)."""
    value = helper.make_tensor("c", TensorProto.FLOAT, constant.shape, constant.ravel())
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("t", "out")]
    node = helper.make_node(op, ["t", "c"], ["out"])
    return helper.make_graph([node], name, [vi[0]], [vi[1]], initializer=[value])


def test_flex_attention_mods_run_through_the_session(node_check: Any) -> None:
    """score_mod and prob_mod graphs run as nested graphs on the session's providers."""
    rng = np.random.default_rng(15)
    feeds = {
        "q": rng.standard_normal((1, 4, 3, 8)).astype(np.float32),
        "k": rng.standard_normal((1, 2, 5, 8)).astype(np.float32),
        "v": rng.standard_normal((1, 2, 5, 8)).astype(np.float32),
    }
    bias = rng.standard_normal((1, 4, 3, 5)).astype(np.float32)  # per query head
    node = helper.make_node("FlexAttention", list(feeds), ["y"], domain="ai.onnx.preview")
    node.attribute.extend(
        [
            helper.make_attribute("score_mod", _mod_graph("score", "Add", bias)),
            helper.make_attribute("prob_mod", _mod_graph("prob", "Mul", np.full(5, 0.5, "f4"))),
        ]
    )
    node_check.against_reference(node, feeds, {"": 26, "ai.onnx.preview": 1}, 1e-5)


def test_flex_attention_untyped_mod_graph_is_claimed(node_check: Any) -> None:
    """A soft-cap score_mod of three nodes whose intermediate values carry no types: they are
    inferred before the session builds the graph, so under fallback="error" every node of it
    is claimed (it would be declined for unknown types otherwise)."""
    rng = np.random.default_rng(16)
    feeds = {n: rng.standard_normal((1, 2, 4, 8)).astype(np.float32) for n in ("q", "k", "v")}
    cap = helper.make_tensor("cap", TensorProto.FLOAT, [], [2.0])
    nodes = [
        helper.make_node("Div", ["s", "cap"], ["a"]),
        helper.make_node("Tanh", ["a"], ["b"]),
        helper.make_node("Mul", ["b", "cap"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "soft_cap",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=[cap],
    )
    node = helper.make_node("FlexAttention", list(feeds), ["y"], domain="ai.onnx.preview")
    node.attribute.append(helper.make_attribute("score_mod", graph))
    node_check.against_reference(node, feeds, {"": 26, "ai.onnx.preview": 1}, 1e-5)
