"""Fusion decisions and launch layouts, on the emulated backend: which nodes form a group
(one output shape per group, float types), the layout a group's inputs get (dense, broadcast,
strided views), and a BERT-like encoder that runs entirely on the provider."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from turnout.tools.testing import provider_session
from turnout_cupy.codegen import Variant
from turnout_cupy.fusion import layout
from turnout_testbed.zoo import bert_like


def _chain(dtype: int = TensorProto.FLOAT) -> bytes:
    """a = x * s ([1, 4]); y = Relu(a + z) ([3, 4]): two shapes, so two groups."""
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["a"], name="scale"),
        helper.make_node("Exp", ["a"], ["e"], name="exp"),
        helper.make_node("Add", ["e", "z"], ["b"], name="add"),
        helper.make_node("Relu", ["b"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [
            helper.make_tensor_value_info("x", dtype, [1, 4]),
            helper.make_tensor_value_info("s", dtype, [1]),
            helper.make_tensor_value_info("z", dtype, [3, 4]),
        ],
        [helper.make_tensor_value_info("y", dtype, [3, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _groups(sess) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    return {a.node: a.group for a in sess.partition_report().assignments}


def test_a_group_has_one_output_shape(emulated: str) -> None:
    sess = provider_session(_chain(), emulated)
    groups = _groups(sess)
    assert groups["scale"] == groups["exp"] is not None
    assert groups["add"] == groups["relu"] is not None
    assert groups["scale"] != groups["add"]
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((1, 4)).astype(np.float32),
        "s": np.array([0.5], np.float32),
        "z": rng.standard_normal((3, 4)).astype(np.float32),
    }
    (y,) = sess.run(None, feeds)
    np.testing.assert_allclose(y, np.maximum(np.exp(feeds["x"] * 0.5) + feeds["z"], 0), 1e-6)


def test_fuse_off_and_integer_types_leave_nodes_alone(emulated: str) -> None:
    assert set(_groups(provider_session(_chain(), emulated, fuse=False)).values()) == {None}
    ints = _chain(TensorProto.INT32)
    ints.graph.node.pop(1)  # no Exp of ints
    ints.graph.node[1].input[0] = "a"
    assert set(_groups(provider_session(ints, emulated)).values()) == {None}


def test_layouts() -> None:
    out = (3, 4)
    # same shape and contiguous: dense, no index arguments
    assert layout([(3, 4), (3, 4)], [(4, 1), (4, 1)], [True, True], out) == (
        Variant(0, (True, True)),
        [],
    )
    # a row broadcast over the rows and a transposed view: strided, broadcast strides 0
    variant, ints = layout([(3, 4), (4,), (3, 4)], [(4, 1), (1,), (1, 3)], [True, True, False], out)
    assert variant == Variant(2, (True, False, False))
    assert ints == [3, 4, 0, 1, 1, 3]
    # a size-1 dimension reads index 0 whatever its stride
    assert layout([(1, 4)], [(4, 1)], [True], out)[1] == [3, 4, 0, 1]


@pytest.mark.parametrize("batch", [1, 3])
def test_bert_like_runs_entirely_on_the_provider(batch: int, emulated: str) -> None:
    model = bert_like(layers=2, hidden=64, heads=4, seq=16)
    sess = provider_session(model, emulated)  # fallback "error": no node may go to CPU
    assignments = sess.partition_report().assignments
    assert {a.provider for a in assignments} == {emulated}
    assert sum(a.group is not None for a in assignments) > len(assignments) / 2
    rng = np.random.default_rng(batch)
    feeds = {
        "x": rng.standard_normal((batch, 16, 64)).astype(np.float32),
        "attention_mask": (rng.random((batch, 16)) > 0.2).astype(np.int64),
    }
    (got,) = sess.run(None, feeds)
    (expected,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def _residual_norm(extra_outputs: bool) -> bytes:
    h = 8
    rng = np.random.default_rng(1)
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [h], rng.standard_normal(h).tolist())
    outs = ["n", "mean", "inv"] if extra_outputs else ["n"]
    nodes = [
        helper.make_node("Add", ["x", "r"], ["s"], name="residual"),
        helper.make_node("LayerNormalization", ["s", "scale"], outs, name="norm"),
        helper.make_node("Sub", ["n", "s"], ["y"], name="after"),
    ]
    graph = helper.make_graph(
        nodes,
        "residual_norm",
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, ["b", h]) for v in ("x", "r")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
        + [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs[1:]],
        [scale],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("extra_outputs", [False, True])
def test_residual_add_and_layer_norm_are_one_kernel(extra_outputs: bool, emulated: str) -> None:
    model = _residual_norm(extra_outputs)
    groups = _groups(provider_session(model, emulated))
    if extra_outputs:  # Mean/InvStdDev wanted: the plain LayerNorm kernel runs it
        assert groups["norm"] is None
    else:  # the sum is read after the norm too: the kernel writes it out
        assert groups["residual"] == groups["norm"] and groups["norm"].startswith("cupy_row")
    sess = provider_session(model, emulated)
    rng = np.random.default_rng(2)
    feeds = {v: rng.standard_normal((3, 8)).astype(np.float32) for v in ("x", "r")}
    got = sess.run(None, feeds)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
