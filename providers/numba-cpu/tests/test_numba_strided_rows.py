"""Groups of run-time shapes on row-strided views and broadcasts: the strided kernel's
versions (every last stride the item size; one input broadcast along the last dimension; the
general loop), its rows counted in blocks across dimension boundaries, serial and parallel;
and Pow's square for an exponent of 2 (other exponents still pow)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout

F = TensorProto.FLOAT


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[str | int]],
    inits: list[onnx.TensorProto] | None = None,
) -> bytes:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", F, None)],
        inits or [],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data: bytes = m.SerializeToString()
    return data


def _session(m: bytes, threads: int) -> turnout.InferenceSession:
    so = turnout.SessionOptions()
    so.fallback = "error"
    return turnout.InferenceSession(
        m, so, providers=[("NumbaExecutionProvider", {"intra_op_num_threads": threads})]
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_scores_of_split_views(threads: int) -> None:
    """A detector's scores: [B, N, 80] by [B, N, 1] Split views of one [B, N, 85] output,
    neither declared 1 (the broadcast input's version), at row counts around the block size."""
    m = _model(
        [helper.make_node("Mul", ["c", "o"], ["y"])], {"c": ["b", "n", "k"], "o": ["b", "n", "j"]}
    )
    sess = _session(m, threads)
    rng = np.random.default_rng(0)
    for b, n in [(1, 6300), (2, 63), (1, 64), (3, 65), (1, 1)]:
        full = rng.standard_normal((b, n, 85)).astype(np.float32)
        c, o = full[..., 5:], full[..., 4:5]
        (got,) = sess.run(None, {"c": c, "o": o})
        np.testing.assert_array_equal(got, c * o)
        (got,) = sess.run(None, {"c": o, "o": c})  # the other input broadcast
        np.testing.assert_array_equal(got, o * c)


@pytest.mark.parametrize("threads", [1, 2])
def test_row_strided_views_without_copies(threads: int) -> None:
    """Views with unit last stride (slices of the last axis, a swap of the outer axes) at rank
    4, rows crossing dimension boundaries inside a block; a scalar and a C-ordered input
    beside them; outputs equal numpy's."""
    m = _model(
        [
            helper.make_node("Mul", ["x", "k"], ["p"]),
            helper.make_node("Sub", ["z", "p"], ["s"]),
            helper.make_node("Add", ["z", "p"], ["a"]),
            helper.make_node("Mul", ["s", "a"], ["y"]),
        ],
        {"x": ["a", "b", "c", "d"], "z": ["a", "b", "c", "d"]},
        [numpy_helper.from_array(np.array(0.5, np.float32), "k")],
    )
    sess = _session(m, threads)
    rng = np.random.default_rng(1)
    base = rng.standard_normal((3, 7, 11, 90)).astype(np.float32)
    cases = [
        (base[..., 4:6], base[..., 0:2]),  # [.., 2] rows of stride 90
        (base[..., 5:85], np.ascontiguousarray(base[..., 0:80])),
        (base.transpose(1, 0, 2, 3)[..., :17], base.transpose(1, 0, 2, 3)[..., 20:37]),
        (base[:, 1::2, :, 3:40], base[:, ::2, :, 50:87][:, :3]),
    ]
    for x, z in cases:
        p = x * np.float32(0.5)
        (got,) = sess.run(None, {"x": x, "z": z})
        np.testing.assert_array_equal(got, (z - p) * (z + p))


def test_general_loop_and_many_inputs() -> None:
    """Five row inputs (beyond the per-input versions), one of them broadcast along the last
    dimension, and views whose last stride is not the item size (copied, or the general loop
    where a broadcast needs the strided kernel)."""
    names = ["a", "b", "c", "d", "e"]
    m = _model([helper.make_node("Sum", names, ["y"])], {n: ["p", "q", "r"] for n in names})
    sess = _session(m, 1)
    rng = np.random.default_rng(2)
    base = rng.standard_normal((2, 70, 40)).astype(np.float32)
    xs = [base[..., k : k + 9] for k in range(4)] + [base[..., 30:31]]
    (got,) = sess.run(None, dict(zip(names, xs)))
    np.testing.assert_allclose(got, sum(xs[1:], xs[0]), rtol=1e-6, atol=1e-6)
    ys = [base[..., k : k + 18 : 2] for k in range(5)]  # last stride 2 items: copied
    (got,) = sess.run(None, dict(zip(names, ys)))
    np.testing.assert_allclose(got, sum(ys[1:], ys[0]), rtol=1e-6, atol=1e-6)
    ys[4] = base[:1, :, 3:12:1][:, :1]  # broadcast along b and n: the strided kernel
    ys[0] = base[..., 0:18:2]
    (got,) = sess.run(None, dict(zip(names, ys)))
    np.testing.assert_allclose(got, sum(ys[1:], ys[0]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [["n", "m"], [5, 9]])
def test_pow_of_two_is_the_square(shape: list[str | int]) -> None:
    """Pow with exponent 2 (an initializer or a run-time input, run-time and static shapes) is
    x * x bit for bit, as numpy's; other exponents (a NaN one too) are pow's."""
    m = _model([helper.make_node("Pow", ["x", "e"], ["y"])], {"x": shape, "e": []})
    sess = _session(m, 1)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 9)) * 30).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    (got,) = sess.run(None, {"x": x, "e": np.array(2, np.float32)})
    np.testing.assert_array_equal(got, x * x)
    for e in (3.0, 0.5, -1.0, np.nan):
        (got,) = sess.run(None, {"x": x, "e": np.array(e, np.float32)})
        with np.errstate(invalid="ignore", divide="ignore"):
            want = np.power(x, np.float32(e))
        # row 0 (NaN, inf, -0) left out: numpy's power to 0.5 is its sqrt (-inf -> NaN),
        # C's pow (numba's, onnxruntime's) gives inf there
        np.testing.assert_allclose(got[1:], want[1:], rtol=2e-6, equal_nan=True)
    fixed = _model(
        [helper.make_node("Pow", ["x", "e"], ["y"])],
        {"x": shape},
        [numpy_helper.from_array(np.array(2.0, np.float32), "e")],
    )
    (got,) = _session(fixed, 1).run(None, {"x": x})
    np.testing.assert_array_equal(got, x * x)


@pytest.mark.parametrize("threads", [1, 2])
def test_long_bodies_copy_row_strided_views(threads: int) -> None:
    """A SiLU plus a broadcast add (a body past VERSION_BODY_MAX: no versions) on Split-like
    views: copied to C order or read by the general loop, equal to numpy within rounding."""
    m = _model(
        [
            helper.make_node("Sigmoid", ["x"], ["s"]),
            helper.make_node("Mul", ["x", "s"], ["m"]),
            helper.make_node("Add", ["m", "z"], ["y"]),
        ],
        {"x": ["a", "b", "c"], "z": ["a", "b", "d"]},
    )
    sess = _session(m, threads)
    rng = np.random.default_rng(4)
    base = (rng.standard_normal((2, 300, 90)) * 4).astype(np.float32)
    for x, z in [(base[..., 3:80], base[..., 10:87]), (base[..., 3:80], base[..., 1:2])]:
        (got,) = sess.run(None, {"x": x, "z": z})
        x64 = x.astype(np.float64)
        want = x64 / (1 + np.exp(-x64)) + z
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
