"""numba Concat: narrow pieces by the compiled row copy, wide ones and views by numpy, every
dtype width; shapes that do not join raise numpy's kernel's error naming the node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.errors import TurnoutError


def _session(
    shapes: list[list[object]], axis: int, elem: int = TensorProto.FLOAT
) -> turnout.InferenceSession:
    names = [f"x{k}" for k in range(len(shapes))]
    g = helper.make_graph(
        [helper.make_node("Concat", names, ["y"], axis=axis, name="join")],
        "g",
        [helper.make_tensor_value_info(n, elem, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    so = turnout.SessionOptions()
    so.fallback = "error"
    sess = turnout.InferenceSession(m.SerializeToString(), so, providers=["NumbaExecutionProvider"])
    (src,) = {a.source for a in sess.partition_report().assignments}
    assert src == "numba"
    return sess


@pytest.mark.parametrize(
    ("shapes", "axis"),
    [
        ([(1, 6300, 2), (1, 6300, 2)], 2),  # yolo boxes: [B, N, 2] corners
        ([(2, 3, 40, 40, 2), (2, 3, 40, 40, 2), (2, 3, 40, 40, 81)], -1),  # a head's xy, wh, conf
        ([(1, 4800, 85), (1, 1200, 85), (1, 300, 85)], 1),  # the heads: wide, numpy's
        ([(70, 3, 1), (70, 0, 1), (70, 5, 1)], 1),  # an empty piece
        ([(100, 1), (100, 63), (100, 65)], 1),  # widths around NARROW
        ([(30, 2), (30, 2)], 1),  # few rows: numpy's
    ],
)
def test_concat_matches_numpy(shapes: list[tuple[int, ...]], axis: int) -> None:
    dims: list[list[object]] = [["b", *s[1:]] for s in shapes]
    sess = _session(dims, axis)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    (y,) = sess.run(None, {f"x{k}": x for k, x in enumerate(xs)})
    np.testing.assert_array_equal(y, np.concatenate(xs, axis))
    # views: a transposed piece and a sliced one go through numpy's copy, the rest compiled
    views = [np.asfortranarray(x) if k % 2 else x for k, x in enumerate(xs)]
    (yv,) = sess.run(None, {f"x{k}": x for k, x in enumerate(views)})
    np.testing.assert_array_equal(yv, y)


@pytest.mark.parametrize(
    ("elem", "dtype"),
    [
        (TensorProto.UINT8, np.uint8),
        (TensorProto.FLOAT16, np.float16),
        (TensorProto.INT64, np.int64),
        (TensorProto.BOOL, np.bool_),
    ],
)
def test_concat_moves_every_item_size(elem: int, dtype: type) -> None:
    sess = _session([["n", 3], ["n", 2]], 1, elem)
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((500, 3)) * 50).astype(dtype)
    b = (rng.standard_normal((500, 2)) * 50).astype(dtype)
    (y,) = sess.run(None, {"x0": a, "x1": b})
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, np.concatenate([a, b], 1))


def test_concat_shapes_that_do_not_join_raise() -> None:
    sess = _session([["n", 3], ["m", 2]], 1)
    a = np.zeros((500, 3), np.float32)
    b = np.zeros((499, 2), np.float32)
    with pytest.raises(TurnoutError, match="join"):
        sess.run(None, {"x0": a, "x1": b})
    (y,) = sess.run(None, {"x0": a, "x1": b[:1].repeat(500, 0)})  # the next run is fine
    assert y.shape == (500, 5)


def test_concat_before_opset_4_is_numpys() -> None:
    g = helper.make_graph(
        [helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [100, 2]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 3)])
    m.ir_version = 3
    sess = turnout.InferenceSession(m.SerializeToString(), providers=["NumbaExecutionProvider"])
    (src,) = {a.source for a in sess.partition_report().assignments}
    assert src == "numpy"
    x = np.ones((100, 2), np.float32)
    (y,) = sess.run(None, {"a": x, "b": 2 * x})
    np.testing.assert_array_equal(y, np.concatenate([x, 2 * x], 1))
