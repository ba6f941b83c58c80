"""Groups whose shapes are known only at run time: the contiguous kernel (inputs of the full
shape, views copied to C order) and the strided one (broadcasting, read-only inputs) give the
same results."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import turnout

F = TensorProto.FLOAT


def _session(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]
) -> turnout.InferenceSession:
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, ["a", "b"]),
            helper.make_tensor_value_info("z", F, ["c", "d"]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    so = turnout.SessionOptions()
    so.fallback = "error"
    return turnout.InferenceSession(m.SerializeToString(), so, providers=["NumbaExecutionProvider"])


def _silu_add() -> turnout.InferenceSession:
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["m"]),
        helper.make_node("Add", ["m", "z"], ["y"]),
    ]
    return _session(nodes, [])


def _want(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    y: np.ndarray = (x64 / (1 + np.exp(-x64)) + z).astype(np.float32)
    return y


def test_views_and_broadcasts_agree() -> None:
    sess = _silu_add()
    assert {a.source for a in sess.partition_report().assignments} == {"fused"}
    rng = np.random.default_rng(0)
    base = rng.standard_normal((70, 50)).astype(np.float32) * 4
    z = rng.standard_normal((50, 70)).astype(np.float32)
    cases = [
        (base.T, z),  # a transposed view: copied, contiguous kernel
        (base.T.copy(), z.T.copy().T),  # a copy and a view
        (base.T.copy(), z[:1]),  # broadcasting: the strided kernel
        (base.T.copy(), z[0].copy()[None, :]),
    ]
    for x, zz in cases:
        (got,) = sess.run(None, {"x": x, "z": zz})
        np.testing.assert_allclose(got, _want(x, zz), rtol=2e-6, atol=1e-6)


def test_read_only_inputs() -> None:
    sess = _silu_add()
    x = np.linspace(-20, 20, 600, dtype=np.float32).reshape(20, 30)
    z = np.ones((20, 30), np.float32)
    x.flags.writeable = False
    (got,) = sess.run(None, {"x": x, "z": z})
    np.testing.assert_allclose(got, _want(x, z), rtol=2e-6, atol=1e-6)


def test_constant_operand() -> None:
    """An initializer (read-only) next to a run-time input of unknown shape."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["p"]), helper.make_node("Add", ["p", "z"], ["y"])]
    k = np.arange(12, dtype=np.float32).reshape(3, 4)
    sess = _session(nodes, [numpy_helper.from_array(k, "k")])
    x = np.ones((4, 3), np.float32).T
    z = np.full((3, 4), 0.5, np.float32)
    (got,) = sess.run(None, {"x": x, "z": z})
    np.testing.assert_array_equal(got, x * k + z)


def test_declared_unit_dimensions_are_read_at_index_zero() -> None:
    """[B, N, 1] * [B, N, K] + bias[K] with B, N symbolic: the unit dimension and the bias's
    missing ones are indexed, not broadcast; serial and parallel kernels agree with numpy."""
    nodes = [helper.make_node("Mul", ["o", "c"], ["p"]), helper.make_node("Add", ["p", "k"], ["y"])]
    k = np.linspace(-1, 1, 80, dtype=np.float32)
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("o", F, ["b", "n", 1]),
            helper.make_tensor_value_info("c", F, ["b", "n", 80]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(k, "k")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    rng = np.random.default_rng(2)
    full = rng.standard_normal((2, 700, 85)).astype(np.float32)
    o, c = full[..., 4:5], full[..., 5:]  # views, as a Split gives them
    for threads in (1, 2):
        so = turnout.SessionOptions()
        so.fallback = "error"
        sess = turnout.InferenceSession(
            m, so, providers=[("NumbaExecutionProvider", {"intra_op_num_threads": threads})]
        )
        (got,) = sess.run(None, {"o": o, "c": c})
        np.testing.assert_array_equal(got, o * c + k)
        (got,) = sess.run(None, {"o": o[:1], "c": c})  # B broadcast: the strided kernel
        np.testing.assert_array_equal(got, o[:1] * c + k)


def test_repeated_runs_at_one_shape_then_a_view_then_another_shape() -> None:
    """The steady state (same shapes, C-contiguous inputs: the kernel called directly) gives
    what the first run gave; a view or a broadcast at those shapes, and a new shape, still go
    the general way with their own results."""
    sess = _silu_add()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 9)).astype(np.float32)
    z = rng.standard_normal((6, 9)).astype(np.float32)
    first = sess.run(None, {"x": x, "z": z})[0]
    for _ in range(3):
        (again,) = sess.run(None, {"x": x, "z": z})
        np.testing.assert_array_equal(again, first)
        assert again is not first
    np.testing.assert_allclose(first, _want(x, z), rtol=2e-6, atol=1e-6)
    xt = x.T.copy().T  # same shape, not C-contiguous
    (got,) = sess.run(None, {"x": xt, "z": z})
    np.testing.assert_array_equal(got, first)
    (got,) = sess.run(None, {"x": x, "z": z[:1]})  # a broadcast operand
    np.testing.assert_allclose(got, _want(x, z[:1]), rtol=2e-6, atol=1e-6)
    x2 = rng.standard_normal((4, 5)).astype(np.float32)
    z2 = rng.standard_normal((4, 5)).astype(np.float32)
    (got,) = sess.run(None, {"x": x2, "z": z2})
    np.testing.assert_allclose(got, _want(x2, z2), rtol=2e-6, atol=1e-6)
