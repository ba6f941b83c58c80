"""A YOLO decode head with a dynamic batch (run-time shapes) on the numba tier, against
onnxruntime: Sigmoid of a Transpose view, Split views into broadcasting groups (a grid, a
scalar), Concat on the last axis, and the objectness x class Mul of two Split views. The
elementwise groups whose inputs are full-size or scalar take the flat contiguous loop."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout

F = TensorProto.FLOAT
NC = 80  # classes


def _head(ny: int, nx: int, na: int = 3) -> onnx.ModelProto:
    no = 5 + NC
    rng = np.random.default_rng(1)
    grid = rng.standard_normal((1, na, ny, nx, 2)).astype(np.float32)
    anchors = rng.random((1, na, ny, nx, 2)).astype(np.float32) * 30
    inits = [
        numpy_helper.from_array(grid, "grid"),
        numpy_helper.from_array(anchors, "anchors"),
        numpy_helper.from_array(np.array([2, 2, NC + 1], np.int64), "sizes"),
        numpy_helper.from_array(np.array([4, 1, NC], np.int64), "sizes2"),
        numpy_helper.from_array(np.float32(2.0), "two"),
        numpy_helper.from_array(np.float32(8.0), "stride"),
    ]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 4, 2]),
        helper.make_node("Sigmoid", ["t"], ["s"]),
        helper.make_node("Split", ["s", "sizes"], ["xy", "wh", "conf"], axis=4),
        helper.make_node("Mul", ["xy", "two"], ["xy2"]),
        helper.make_node("Add", ["xy2", "grid"], ["xyg"]),
        helper.make_node("Mul", ["xyg", "stride"], ["xyp"]),
        helper.make_node("Mul", ["wh", "two"], ["wh2"]),
        helper.make_node("Pow", ["wh2", "two"], ["whp"]),
        helper.make_node("Mul", ["whp", "anchors"], ["wha"]),
        helper.make_node("Concat", ["xyp", "wha", "conf"], ["cat"], axis=4),
        helper.make_node("Flatten", ["cat"], ["flat"], axis=4),
        helper.make_node("Split", ["flat", "sizes2"], ["box", "obj", "cls"], axis=1),
        helper.make_node("Mul", ["cls", "obj"], ["scores"]),
        helper.make_node("Sigmoid", ["obj"], ["obj_s"]),  # [N, 1]: a column view
    ]
    g = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", F, ["batch", na, no, ny, nx])],
        [
            helper.make_tensor_value_info("cat", F, None),
            helper.make_tensor_value_info("scores", F, None),
            helper.make_tensor_value_info("obj_s", F, None),
        ],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _numba(m: onnx.ModelProto) -> turnout.InferenceSession:
    """`m` on the numba provider alone (a node it does not take fails the session)."""
    so = turnout.SessionOptions()
    so.fallback = "error"
    return turnout.InferenceSession(m.SerializeToString(), so, providers=["NumbaExecutionProvider"])


@pytest.mark.parametrize(("ny", "nx", "batch"), [(40, 40, 1), (20, 20, 2), (10, 10, 3), (3, 5, 1)])
def test_decode_head_matches_onnxruntime(ny: int, nx: int, batch: int) -> None:
    ort = pytest.importorskip("onnxruntime", reason="the reference runtime for parity")
    m = _head(ny, nx)
    sess = _numba(m)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((batch, 3, 5 + NC, ny, nx)).astype(np.float32)
    x *= 4
    for _ in range(2):  # the second run reuses the per-shape plans
        got = sess.run(None, {"x": x})
        want = ref.run(None, {"x": x})
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)  # onnxruntime: MLAS sigmoid


def test_flat_loop_serves_full_size_and_scalar_inputs() -> None:
    """A group of full-size inputs and a scalar runs the 1-D contiguous kernel; lengths around
    the 4096-element block and the vector width, and an empty batch, agree with numpy."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["s", "k"], ["m"]),
        helper.make_node("Add", ["m", "x"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["a", 7])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.float32(3.0), "k")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = _numba(m)
    (kind,) = {a.source for a in sess.partition_report().assignments}
    assert kind == "fused"
    rng = np.random.default_rng(2)
    for rows in (0, 1, 3, 585, 586, 1171, 2000):
        x = (rng.standard_normal((rows, 7)) * 6).astype(np.float32)
        x64 = x.astype(np.float64)
        want = 3.0 / (1.0 + np.exp(-x64)) + x64
        (y,) = sess.run(None, {"x": x})
        assert y.shape == (rows, 7)
        np.testing.assert_allclose(y, want, rtol=3e-6, atol=1e-6)
        (yt,) = sess.run(None, {"x": np.asfortranarray(x)})  # a view: copied, same loop
        np.testing.assert_array_equal(yt, y)


@pytest.mark.parametrize(
    ("x_dims", "z_dims", "x_shape", "z_shape"),
    [
        (["a", "b", 4, 5], [1, 1, 4, 5], (2, 3, 4, 5), (1, 1, 4, 5)),  # [a*b, 20] x [1, 20]
        (["a", 1, 6], [1, "c", 6], (3, 1, 6), (1, 5, 6)),  # no two dimensions merge
        ([1, "a", "b", 1], [1, "a", "b", 9], (1, 4, 3, 1), (1, 4, 3, 9)),  # [12, 1] x [12, 9]
    ],
)
def test_collapsed_dimensions_agree_with_numpy(
    x_dims: list[object], z_dims: list[object], x_shape: tuple[int, ...], z_shape: tuple[int, ...]
) -> None:
    """Groups whose inputs are declared 1 in some dimensions run over the dimensions merged by
    broadcast pattern; C-ordered inputs and views give numpy's broadcast result."""
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["m"]),
        helper.make_node("Sub", ["m", "z"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, x_dims),
            helper.make_tensor_value_info("z", F, z_dims),
        ],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.float32(1.5), "k")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = _numba(m)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    z = rng.standard_normal(z_shape).astype(np.float32)
    want = x * np.float32(1.5) - z
    for xv, zv in ((x, z), (np.asfortranarray(x), np.asfortranarray(z))):
        (y,) = sess.run(None, {"x": xv, "z": zv})
        np.testing.assert_array_equal(y, want)


def test_inputs_permuted_alike_compute_in_memory_order() -> None:
    """Two Transpose views with the same permutation and a scalar: the group computes in
    their memory order (no copy) and returns the same permutation of its buffer; a view next
    to a C-ordered input, or permuted differently, is copied. All agree with numpy."""
    perm = [0, 2, 3, 1]
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=perm),
        helper.make_node("Transpose", ["z"], ["zt"], perm=perm),
        helper.make_node("Sigmoid", ["xt"], ["s"]),
        helper.make_node("Mul", ["s", "k"], ["m"]),
        helper.make_node("Sub", ["m", "zt"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, ["n", 5, 6, 7]),
            helper.make_tensor_value_info("z", F, ["n", 5, 6, 7]),
        ],
        [helper.make_tensor_value_info("y", F, ["n", 6, 7, 5])],
        [numpy_helper.from_array(np.float32(-2.5), "k")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = _numba(m)
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2, 5, 6, 7)) * 5).astype(np.float32)
    z = rng.standard_normal((2, 5, 6, 7)).astype(np.float32)
    x64 = x.transpose(perm).astype(np.float64)
    want = -2.5 / (1.0 + np.exp(-x64)) - z.transpose(perm)
    zt_c = np.ascontiguousarray(z.transpose(perm)).transpose(0, 3, 1, 2)  # zt is C-ordered
    for zv in (z, np.asfortranarray(z), zt_c):
        (y,) = sess.run(None, {"x": x, "z": zv})
        assert y.shape == (2, 6, 7, 5)
        np.testing.assert_allclose(y, want, rtol=3e-6, atol=1e-6)


def test_lower_rank_input_next_to_a_permuted_one() -> None:
    """A [1, a, b] Transpose view next to an [a, b] input: the flat group cannot permute the
    lower-rank one to the group's rank, so both are copied to C order instead."""
    g = helper.make_graph(
        [helper.make_node("Add", ["z", "x"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("z", F, [1, "a", "b"]),
            helper.make_tensor_value_info("x", F, ["a", "b"]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = _numba(m)
    rng = np.random.default_rng(5)
    z = rng.standard_normal((1, 7, 6)).astype(np.float32).transpose(0, 2, 1)  # [1, 6, 7] view
    x = rng.standard_normal((6, 7)).astype(np.float32)
    for xv in (x, x[::-1][::-1], np.asfortranarray(x)):
        (y,) = sess.run(None, {"z": z, "x": xv})
        np.testing.assert_array_equal(y, z + x)
