"""Fused groups whose shapes are known at session creation: specialised kernels with bound
constants and a thin run wrapper (shape check, allocation, one call), checked against the numpy
kernels (`cpu_session`); the serial kernel for small groups; dynamic shapes keep the general
path."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.engine.executor.build import fused_subgraph
from turnout.graph.dtypes import elem_type_of
from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import GraphView
from turnout.sdk.provider import Capability
from turnout.tools.testing import cpu_session
from turnout_numba import cache
from turnout_numba.codegen import SERIAL_WORK, GroupKernel, compile_group
from turnout_testbed.zoo import tiny_ops_chain

F = TensorProto.FLOAT


def _model(
    nodes: list[Any],
    inputs: dict[str, tuple[int, list[Any]]],
    outputs: list[str],
    inits: dict[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _session(
    model: onnx.ModelProto, threads: int = 1, so: turnout.SessionOptions | None = None
) -> turnout.InferenceSession:
    so = so or turnout.SessionOptions()
    so.fallback = "error"
    return turnout.InferenceSession(
        model.SerializeToString(),
        so,
        providers=[("NumbaExecutionProvider", {"intra_op_num_threads": threads})],
    )


def _check_vs_cpu(
    model: onnx.ModelProto, feeds: dict[str, Any], threads: int = 1, rtol: float = 1e-5
) -> turnout.InferenceSession:
    sess = _session(model, threads)
    got = sess.run(None, feeds)
    want = cpu_session(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)
    return sess


def _groups(sess: turnout.InferenceSession) -> list[list[str]]:
    by: dict[str, list[str]] = {}
    for a in sess.partition_report().assignments:
        if a.source == "fused" and a.group:
            by.setdefault(a.group, []).append(a.node)
    return list(by.values())


def _compile(
    sess: turnout.InferenceSession, members: list[str], *, parallel: bool = False
) -> GroupKernel:
    """The group `members` of `sess`'s graph compiled again, from the subgraph turnout gives
    the provider."""
    sg = fused_subgraph(Capability(tuple(members)), GraphView(sess._engine.graph, {}))
    return compile_group(
        sg.nodes,
        [o.name for o in sg.outputs],
        "grp",
        parallel=parallel,
        constants=sg.constants,
        inputs=sg.inputs,
    )


def _rand(rng: np.random.Generator, shape: list[int], dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------------------------------
# static groups vs the CPU provider


BROADCASTS = [
    # (x, y, z) shapes: runtime inputs of every broadcast pattern, scalars and empty tensors
    ([3, 4, 5], [4, 1], [5]),
    ([2, 1, 3], [1, 4, 1], []),
    ([6], [1], [6]),
    ([1, 1], [1, 7], [3, 1]),
    ([0, 4], [4], [1, 4]),
    ([], [], []),
    # runs of dimensions the kernel merges (`codegen._coalesce`), next to ones it cannot
    ([2, 3, 4, 5], [3, 4, 1], [1, 1, 1, 5]),
    ([4, 1, 6, 7], [1, 5, 1, 1], [6, 7]),
    ([1, 3, 4, 2, 5], [1, 3, 4, 2, 5], [5]),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=[str(s) for s in BROADCASTS])
def test_static_broadcasts_match_cpu(shapes: tuple[list[int], ...], threads: int) -> None:
    xs, ys, zs = shapes
    nodes = [
        helper.make_node("Mul", ["x", "y"], ["m"]),
        helper.make_node("Tanh", ["z"], ["tz"]),  # smaller than the group: exported as is
        helper.make_node("Add", ["m", "tz"], ["s"]),
        helper.make_node("Less", ["s", "y"], ["c"]),  # a bool output next to float ones
        helper.make_node("Where", ["c", "s", "x"], ["out"]),
    ]
    model = _model(nodes, {"x": (F, xs), "y": (F, ys), "z": (F, zs)}, ["out", "tz", "c"])
    rng = np.random.default_rng(0)
    feeds = {"x": _rand(rng, xs), "y": _rand(rng, ys), "z": _rand(rng, zs)}
    sess = _check_vs_cpu(model, feeds, threads)
    (members,) = _groups(sess)
    assert _compile(sess, members).static


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [[70000], [3, 1, 130, 200]])
def test_large_static_groups_run_parallel_loops_correctly(shape: list[int], threads: int) -> None:
    nodes = [
        helper.make_node("Sub", ["x", "b"], ["d"]),
        helper.make_node("Sigmoid", ["d"], ["s"]),
        helper.make_node("Mul", ["s", "x"], ["y"]),
    ]
    b = np.linspace(-1, 1, shape[-1], dtype=np.float32)
    model = _model(nodes, {"x": (F, shape)}, ["y", "s"], {"b": b})
    x = _rand(np.random.default_rng(1), shape)
    sess = _check_vs_cpu(model, {"x": x}, threads)
    (members,) = _groups(sess)
    gk = _compile(sess, members, parallel=True)
    assert gk.static and "prange(" in gk.source  # big enough for the parallel kernel


@pytest.mark.parametrize("threads", [1, 2])
def test_a_0d_runtime_input_in_a_parallel_static_group(threads: int) -> None:
    """A dynamic quantizer's 0-d scale times a weight scale, times a conv's 4-D output (the
    dynamically quantized OCR model): numba's parfor lowering cannot index a 0-d array inside
    a prange loop, so the kernel reads it once before the loops."""
    nodes = [helper.make_node("Mul", ["s", "c"], ["t"]), helper.make_node("Mul", ["x", "t"], ["y"])]
    shape = [1, 32, 24, 80]
    c = np.array([0.5], np.float32)
    model = _model(nodes, {"s": (F, []), "x": (F, shape)}, ["y"], {"c": c})
    x = _rand(np.random.default_rng(2), shape)
    sess = _session(model, threads)
    (y,) = sess.run(None, {"s": np.array(3, np.float32), "x": x})
    np.testing.assert_allclose(y, x * np.float32(1.5), rtol=1e-6)
    (members,) = _groups(sess)
    gk = _compile(sess, members, parallel=True)
    assert gk.static and "prange(" in gk.source


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.float64, np.int64])
def test_static_chain_dtypes_wrap_like_unfused(dtype: Any) -> None:
    et = elem_type_of(np.dtype(dtype))
    k = np.array([100, 77, 3], dtype)  # int8: sums and products overflow and wrap
    nodes = [
        helper.make_node("Add", ["x", "k"], ["s"]),
        helper.make_node("Mul", ["s", "s"], ["p"]),
        helper.make_node("Sub", ["p", "x"], ["y"]),
    ]
    model = _model(nodes, {"x": (et, [4, 3])}, ["y", "s"], {"k": k})
    x = (np.random.default_rng(2).random((4, 3)) * 120).astype(dtype)
    sess = _check_vs_cpu(model, {"x": x})
    (members,) = _groups(sess)
    assert _compile(sess, members).static


def test_tiny_ops_chain_is_one_static_group_with_constants_bound() -> None:
    model = tiny_ops_chain(40)
    x = _rand(np.random.default_rng(3), [1, 16])
    sess = _check_vs_cpu(model, {"x": x}, threads=2)
    (members,) = _groups(sess)
    assert len(members) == 40
    gk = _compile(sess, members, parallel=True)
    assert gk.static and "prange(" not in gk.source  # small: serial even when threads > 1
    assert len(members) * 16 < SERIAL_WORK
    # the kernel takes the live input, one buffer of packed float constants and the output
    assert "def kernel(in0, cb0, out0):" in gk.source
    consts = [v for v in gk.inputs if v != "x"]
    assert consts and all(v in sess._engine.graph.initializers for v in consts)


# ------------------------------------------------------------------------------------------
# constants, shapes and errors


def _const_model() -> tuple[onnx.ModelProto, np.ndarray]:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    return _model(nodes, {"x": (F, [4, 2, 3])}, ["y"], {"w": w}), w


def test_constant_replaced_by_add_initializer_is_used() -> None:
    model, w = _const_model()
    x = np.abs(_rand(np.random.default_rng(4), [4, 2, 3]))
    so = turnout.SessionOptions()
    w2 = (w + 10).astype(np.float32)
    so.add_initializer("w", w2)
    got = _session(model, so=so).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.maximum(x * w2, 0), rtol=1e-6)
    np.testing.assert_allclose(_session(model).run(None, {"x": x})[0], np.maximum(x * w, 0))


def test_overridable_initializer_is_not_bound() -> None:
    model, w = _const_model()
    model.graph.input.append(helper.make_tensor_value_info("w", F, [2, 3]))
    x = np.abs(_rand(np.random.default_rng(5), [4, 2, 3]))
    sess = _session(model)
    w2 = (w * -1).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x, "w": w2})[0], np.maximum(x * w2, 0))
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x * w, 0))


def test_shape_mismatch_names_group_and_input() -> None:
    model, w = _const_model()
    sess = _session(model)
    gk = _compile(sess, _groups(sess)[0])
    assert gk.static and gk.inputs == ("x", "w")
    with pytest.raises(InvalidArgument, match=r"grp: input 'x' has shape \(2, 2, 3\)"):
        gk.fn(np.ones((2, 2, 3), np.float32), w)
    with pytest.raises(InvalidArgument, match=r"grp: input 'w' has shape \(3,\)"):
        gk.fn(np.ones((4, 2, 3), np.float32), np.ones(3, np.float32))  # a replaced constant


def test_static_inputs_may_be_strided_or_read_only() -> None:
    model, w = _const_model()
    sess = _session(model)
    gk = _compile(sess, _groups(sess)[0])
    base = _rand(np.random.default_rng(6), [3, 2, 4])
    x = base.transpose(2, 1, 0)  # (4, 2, 3), not contiguous
    x.flags.writeable = False
    (y,) = gk.fn(x, w)
    np.testing.assert_allclose(y, np.maximum(x * w, 0), rtol=1e-6)
    (y2,) = gk.fn(x, w)
    assert y2 is not y  # every run hands out fresh outputs


def test_symbolic_dims_keep_the_dynamic_path() -> None:
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Exp", ["s"], ["o"])]
    model = _model(nodes, {"x": (F, ["n", 3]), "y": (F, [3])}, ["o"])
    rng = np.random.default_rng(7)
    for n in (1, 5):
        feeds = {"x": _rand(rng, [n, 3]), "y": _rand(rng, [3])}
        sess = _check_vs_cpu(model, feeds, threads=2)
    (members,) = _groups(sess)
    gk = _compile(sess, members, parallel=True)
    assert not gk.static
    # both variants are compiled: small runs take the serial one
    kernel = cache.load_source(gk.source, "ew").kernel
    assert {(kernel, False), (kernel, True)} <= {k[:2] for k in cache._DISPATCHERS}


def test_dynamic_group_follows_changing_shapes_and_refuses_a_bad_one() -> None:
    """The dynamic wrapper keeps the broadcast plan of the last shapes: alternating shapes must
    each get their own plan, a shape that cannot broadcast is an error naming the group, and
    the next good run is still right."""
    nodes = [
        helper.make_node("Add", ["x", "y"], ["s"]),
        helper.make_node("Mul", ["s", "y"], ["m"]),
        helper.make_node("Relu", ["m"], ["o"]),
        helper.make_node("Neg", ["s"], ["n"]),
    ]
    model = _model(nodes, {"x": (F, ["a", "b"]), "y": (F, ["c"])}, ["o", "n"])
    sess = _session(model)
    assert [len(g) for g in _groups(sess)] == [4]
    rng = np.random.default_rng(8)
    for shape_x, shape_y in [([2, 3], [3]), ([4, 1], [5]), ([2, 3], [1]), ([4, 1], [5])]:
        x, y = _rand(rng, shape_x), _rand(rng, shape_y)
        o, n = sess.run(None, {"x": x, "y": y})
        np.testing.assert_allclose(o, np.maximum((x + y) * y, 0), rtol=1e-6)
        np.testing.assert_allclose(n, -(x + y), rtol=1e-6)
    with pytest.raises(InvalidArgument, match="cannot be broadcast"):
        sess.run(None, {"x": _rand(rng, [2, 3]), "y": _rand(rng, [4])})
    x, y = _rand(rng, [2, 3]), _rand(rng, [3])
    np.testing.assert_allclose(sess.run(None, {"x": x, "y": y})[1], -(x + y), rtol=1e-6)


def test_prelu_slope_that_does_not_broadcast_to_x_is_invalid() -> None:
    nodes = [
        helper.make_node("PRelu", ["x", "s"], ["p"]),
        helper.make_node("Neg", ["p"], ["y"]),
    ]
    model = _model(nodes, {"x": (F, [3]), "s": (F, [2, 3])}, ["y"])
    try:
        sess = _session(model)
    except Exception as e:  # shape inference may reject it at session creation already
        assert "PRelu" in str(e) or "broadcast" in str(e)
        return
    with pytest.raises(InvalidArgument, match="slope"):
        sess.run(None, {"x": np.ones(3, np.float32), "s": np.ones((2, 3), np.float32)})


def test_coalesced_dimensions() -> None:
    """Adjacent dimensions that every value spans alike become one loop; a full-size
    elementwise group is a flat loop (a Sigmoid over (1, 3, 40, 40, 85) ran its 4800 rows of 85
    in 0.68 ms, the flat loop in 0.56)."""
    from turnout_numba.codegen import _coalesce

    shapes = {"x": (1, 3, 40, 40, 85), "y": (1, 3, 40, 40, 85)}
    space, out = _coalesce((1, 3, 40, 40, 85), shapes, ["x", "y"])
    assert space == (408000,) and out == {"x": (408000,), "y": (408000,)}
    shapes = {"a": (2, 3, 4, 5), "b": (3, 4, 1), "c": (5,), "s": ()}
    space, out = _coalesce((2, 3, 4, 5), shapes, ["a", "b", "c", "s"])
    assert space == (2, 12, 5)
    assert out == {"a": (2, 12, 5), "b": (1, 12, 1), "c": (1, 1, 5), "s": ()}
    silu = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])]
    model = _model(silu, {"x": (F, [1, 3, 40, 40, 85])}, ["y"])
    feeds = {"x": _rand(np.random.default_rng(1), [1, 3, 40, 40, 85])}
    sess = _check_vs_cpu(model, feeds)
    (members,) = _groups(sess)
    assert "range(408000)" in _compile(sess, members).source
