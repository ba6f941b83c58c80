"""Kernels that plan once per input shape (or keep what they derive from a constant input) must
give, on every run, exactly what a freshly built kernel gives: at the same shapes again, after a
change of shapes, and back. Errors of a bad run stay the node's typed errors.

The comparison is bitwise (NaN equal to NaN): a plan reuses the arithmetic of the general path,
it does not approximate it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import Graph, schema_since_version
from turnout.providers.cpu import kernels as _kernels  # noqa: F401 - registers them
from turnout.providers.cpu.registry import CPU_KERNELS
from turnout.sdk.provider import KernelNode
from turnout.tools.testing import one_node_model, positional_inputs

Kernel = Callable[..., Sequence[Any]]
Opsets = Mapping[str, int] | int


def build(node: onnx.NodeProto, inputs: Sequence[Any], opsets: Opsets) -> Kernel:
    """The CPU provider's own kernel function for `node`, typed from `inputs`."""
    model = one_node_model(node, inputs, opsets)
    versions = {d.domain: d.version for d in model.opset_import}
    n = Graph.from_proto(model.graph, versions).nodes[0]
    opset = versions.get(n.domain, 1)
    since = schema_since_version(n.domain, n.op_type, opset) or opset
    kdef, reason = CPU_KERNELS.match(KernelNode(n, opset, since))
    assert kdef is not None, reason
    fn = kdef.factory(KernelNode(n, opset, since))

    def run(*values: Any) -> Sequence[Any]:
        with np.errstate(all="ignore"):
            return fn(*positional_inputs(node, list(values)))

    return run


def assert_identical(got: Sequence[Any], want: Sequence[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
            continue
        g, w = np.asarray(g), np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        assert np.array_equal(g, w, equal_nan=g.dtype.kind in "fc"), np.abs(g - w).max()


def check_sequence(node: onnx.NodeProto, runs: Sequence[Sequence[Any]], opset: Opsets = 18) -> None:
    """One kernel through `runs` (and the first run again) against a fresh kernel per run."""
    kernel = build(node, runs[0], opset)
    for values in [*runs, runs[0]]:
        assert_identical(kernel(*values), build(node, values, opset)(*values))


def f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Conv: geometry planned per (X shape, W shape, dtype)

CONV = [
    # (X shape, W shape, attrs)
    ((1, 16, 32), (16, 16, 3), {"pads": [1, 1]}),
    ((1, 3, 9), (4, 3, 3), {"strides": [2], "pads": [1, 2], "dilations": [2]}),
    ((2, 4, 8, 7), (6, 2, 3, 3), {"group": 2, "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
    ((1, 4, 8, 7), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 8, 5, 6), (16, 8, 1, 1), {}),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), {"strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]}),
]


@pytest.mark.parametrize("xs, ws, attrs", CONV, ids=range(len(CONV)))
@pytest.mark.parametrize("op", ["Conv", "FusedConv"])
def test_conv_replans_when_shapes_change(
    xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any], op: str, rng: Any
) -> None:
    extra = {"domain": "ai.turnout", "activation": "Relu"} if op == "FusedConv" else {}
    node = helper.make_node(op, ["x", "w", "b"], ["y"], name="my_conv", **attrs, **extra)
    w, b = f32(rng, *ws), f32(rng, ws[0])
    wider = (xs[0] + 1, xs[1], *[s + 2 for s in xs[2:]])
    runs = [[f32(rng, *xs), w, b], [f32(rng, *xs), w, b], [f32(rng, *wider), w, b]]
    runs.append([runs[0][0].astype(np.float64), w.astype(np.float64), b.astype(np.float64)])
    runs.append([np.asfortranarray(runs[0][0]), w, None])
    check_sequence(node, runs, {"": 18, "ai.turnout": 1} if op == "FusedConv" else 18)


def test_conv_errors_after_a_plan(rng: Any) -> None:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="my_conv", pads=[1, 1])
    kernel = build(node, [f32(rng, 1, 4, 9), f32(rng, 5, 4, 3), f32(rng, 5)], 18)
    kernel(f32(rng, 1, 4, 9), f32(rng, 5, 4, 3), f32(rng, 5))
    with pytest.raises(InvalidArgument, match=r"^my_conv: input channels 3"):
        kernel(f32(rng, 1, 3, 9), f32(rng, 5, 4, 3), f32(rng, 5))
    with pytest.raises(InvalidArgument, match=r"^my_conv: bias shape \(4,\)"):
        kernel(f32(rng, 1, 4, 9), f32(rng, 5, 4, 3), f32(rng, 4))


# --------------------------------------------------------------------------------------------
# Recurrent ops: R^T kept while R is the plan's constant


def _lstm_model(constant: bool, hs: int, rng: Any, peepholes: bool = False) -> onnx.ModelProto:
    isz, nd = 5, 2
    weights = {
        "W": f32(rng, nd, 4 * hs, isz),
        "R": f32(rng, nd, 4 * hs, hs),
        "B": f32(rng, nd, 8 * hs),
    }
    if peepholes:
        weights["P"] = f32(rng, nd, 3 * hs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 2, isz])]
    inits = []
    for name, value in weights.items():
        if constant:
            inits.append(numpy_helper.from_array(value, name))
        else:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, value.shape))
    ins = ["x", "W", "R", "B", "", "", ""] + (["P"] if peepholes else [])
    node = helper.make_node(
        "LSTM", ins, ["y", "yh"], name="my_lstm", hidden_size=hs, direction="bidirectional"
    )
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "yh")]
    graph = helper.make_graph([node], "g", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("peepholes", [False, True])
def test_lstm_constant_weights_as_fed_weights(peepholes: bool, rng: Any) -> None:
    """R as an initializer (R^T kept) and as a feed (recomputed) give the same outputs, run
    after run, and a fed R changed in place between runs is read again."""
    const = _lstm_model(True, 6, np.random.default_rng(1), peepholes)
    fed = _lstm_model(False, 6, np.random.default_rng(1), peepholes)
    weights = {t.name: numpy_helper.to_array(t).copy() for t in const.graph.initializer}
    a = turnout.InferenceSession(const.SerializeToString(), providers=["CPUExecutionProvider"])
    b = turnout.InferenceSession(fed.SerializeToString(), providers=["CPUExecutionProvider"])
    for steps in (3, 3, 1, 4):
        x = {"x": f32(rng, steps, 2, 5)}
        assert_identical(a.run(None, x), b.run(None, {**x, **weights}))
    before = b.run(None, {**x, **weights})
    weights["R"] *= np.float32(0.5)
    after = b.run(None, {**x, **weights})
    assert not np.array_equal(before[0], after[0])
    fresh = turnout.InferenceSession(fed.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_identical(after, fresh.run(None, {**x, **weights}))


# --------------------------------------------------------------------------------------------
# Shape and data-movement ops: plans per (input shape, values of the shape-like inputs)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def _shape_cases() -> list[Any]:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 6, 5)), rng.standard_normal((3, 4, 7))
    c = rng.standard_normal((1, 3, 1))
    f = np.array  # float64 scalars for Range
    negative_zero = numpy_helper.from_array(np.array([-0.0], np.float32))
    node = helper.make_node
    cases = [
        ("Reshape", node("Reshape", ["x", "s"], ["y"]), [
            [a, i64(0, -1)], [b, i64(0, -1)], [a, i64(6, 10)],
        ]),
        ("Transpose", node("Transpose", ["x"], ["y"], perm=[2, 0, 1]), [[a], [b]]),
        ("Transpose-reverse", node("Transpose", ["x"], ["y"]), [[a], [a[0]]]),
        ("Squeeze", node("Squeeze", ["x", "a"], ["y"]), [
            [c, i64(0)], [c, i64(-1)], [c, i64(0, 2)],
        ]),
        ("Squeeze-all", node("Squeeze", ["x"], ["y"]), [[c], [a[:1, :1]]]),
        ("Unsqueeze", node("Unsqueeze", ["x", "a"], ["y"]), [
            [a, i64(0, 4)], [b, i64(0, 4)], [a, i64(-1)],
        ]),
        ("Flatten", node("Flatten", ["x"], ["y"], axis=-1), [[a], [b], [a[0]]]),
        ("Concat", node("Concat", ["p", "q"], ["y"], axis=-2), [[a, a], [a, a[:, :2]], [b, b]]),
        ("Split", node("Split", ["x", "s"], ["y0", "y1"], axis=1), [
            [a, i64(2, 4)], [a, i64(6, 0)], [b, i64(1, 3)],
        ]),
        ("Split-equal", node("Split", ["x"], ["y0", "y1", "y2"], axis=-1, num_outputs=3), [
            [a], [b],
        ]),
        ("Slice", node("Slice", ["x", "s", "e", "a", "t"], ["y"]), [
            [a, i64(1), i64(9), i64(1), i64(1)],
            [a, i64(-1), i64(-9), i64(-1), i64(-1)],
            [b, i64(1), i64(9), i64(1), i64(1)],
            [a, i64(0, 1), i64(4, 100), i64(1, 2), i64(2, 1)],
        ]),
        ("Expand", node("Expand", ["x", "s"], ["y"]), [
            [c, i64(2, 3, 4)], [c, i64(1)], [a[:, :1], i64(2, 3, 5)],
        ]),
        ("ConstantOfShape", node("ConstantOfShape", ["s"], ["y"], value=negative_zero), [
            [i64(2, 3)], [i64(4)], [i64()],
        ]),
        ("ConstantOfShape-zero", node("ConstantOfShape", ["s"], ["y"]), [[i64(2, 3)], [i64(4)]]),
        ("Range", node("Range", ["a", "b", "c"], ["y"]), [
            [f(0.0), f(3.0), f(0.5)], [f(-0.0), f(3.0), f(0.5)], [f(1.0), f(2.0), f(0.25)],
        ]),
        ("Gather", node("Gather", ["x", "i"], ["y"], axis=1), [
            [a, i64(1, -1)], [a, np.array(-6, np.int64)], [b, np.array([[0, 3]], np.int32)],
        ]),
    ]  # fmt: skip
    for mode in ("constant", "reflect", "edge", "wrap"):
        runs = [
            [a, i64(2, 3), i64(-1)],
            [b, i64(2, 3), i64(-1)],
            [a, i64(0, -1, 1, 0), i64(0, 2)],
            [a, i64(0, 0), i64(1)],
        ]
        cases.append((f"Pad-{mode}", node("Pad", ["x", "p", "", "a"], ["y"], mode=mode), runs))
    return cases


@pytest.mark.parametrize(
    "name, node, runs", _shape_cases(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_shape_ops_replan(name: str, node: onnx.NodeProto, runs: list[list[Any]]) -> None:
    node.name = f"my_{name}"
    check_sequence(node, runs)


def test_range_result_is_the_callers(rng: Any) -> None:
    """Range keeps its last result per inputs: each run still gets an array of its own."""
    kernel = build(helper.make_node("Range", ["a", "b", "c"], ["y"]), [i64(0)[0], 5, 1], 18)
    args = (np.array(0, np.int64), np.array(5, np.int64), np.array(1, np.int64))
    first = kernel(*args)[0]
    first[:] = -1
    assert kernel(*args)[0].tolist() == [0, 1, 2, 3, 4]


ERROR_CASES = [
    # op, good inputs (planned first), bad inputs, the error
    ("Reshape", [np.zeros((2, 3)), i64(3, 2)], [np.zeros((2, 3)), i64(4, -1)], "cannot reshape"),
    ("Squeeze", [np.zeros((1, 3)), i64(0)], [np.zeros((2, 3)), i64(0)], "cannot squeeze axis 0"),
    (
        "Slice",
        [np.zeros((2, 3)), i64(0), i64(1), i64(1), i64(1)],
        [np.zeros((2, 3)), i64(0), i64(1), i64(5), i64(1)],
        "axis 5 is out of range",
    ),
    ("Gather", [np.zeros((2, 3)), i64(1)], [np.zeros((2, 3)), i64(2)], "index 2 is out of bounds"),
    ("Expand", [np.zeros((2, 3)), i64(2, 3)], [np.zeros((2, 3)), i64(4, 3)], "cannot expand"),
    ("Pad", [np.zeros((2, 3)), i64(0, 1, 0, 1)], [np.zeros((2, 3)), i64(0, -3, 0, -1)], "crop"),
    (
        "Concat",
        [np.zeros((2, 3)), np.zeros((2, 3))],
        [np.zeros((2, 3)), np.zeros((3, 2))],
        "cannot",
    ),
    ("Split", [np.zeros((4,)), i64(1, 3)], [np.zeros((4,)), i64(1, 2)], "does not divide"),
]


@pytest.mark.parametrize("op, good, bad, message", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_errors_after_a_plan(op: str, good: list[Any], bad: list[Any], message: str) -> None:
    """A kernel that planned for good inputs still raises the node's error for bad ones."""
    names = ["x", "a", "b", "c", "d"][: len(good)]
    outputs = ["y0", "y1"] if op == "Split" else ["y"]
    node = helper.make_node(op, names, outputs, name=f"my_{op}")
    kernel = build(node, good, 18)
    kernel(*good)
    with pytest.raises(InvalidArgument, match=f"^my_{op}: .*{message}"):
        kernel(*bad)


# --------------------------------------------------------------------------------------------
# Reductions, softmax and Cast: checked axes per (rank, axes values), converter per dtype


def _misc_cases() -> list[Any]:
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 3, 5)).astype(np.float32), rng.standard_normal((4, 6))
    ints = np.arange(24, dtype=np.int64).reshape(2, 3, 4) - 7
    node = helper.make_node
    return [
        ("ReduceMean", node("ReduceMean", ["x", "a"], ["y"], keepdims=0), 18, [
            [a, i64(2)], [a, i64(0, -1)], [b, i64(1)], [ints, i64(1)], [a, i64()],
        ]),
        ("ReduceSum-noop", node("ReduceSum", ["x", "a"], ["y"], noop_with_empty_axes=1), 18, [
            [a, i64()], [a, i64(1)], [b, i64()],
        ]),
        ("ReduceMax", node("ReduceMax", ["x"], ["y"], axes=[1]), 13, [[a], [b], [ints]]),
        ("Softmax", node("Softmax", ["x"], ["y"], axis=1), 18, [[a], [b], [a[:, :0]], [a]]),
        ("Softmax-11", node("Softmax", ["x"], ["y"], axis=1), 11, [[a], [b], [a[:, :0]], [a]]),
        ("LogSoftmax", node("LogSoftmax", ["x"], ["y"]), 18, [[a], [b], [a[0, 0]]]),
        ("Cast", node("Cast", ["x"], ["y"], to=TensorProto.INT8), 19, [
            [a * 100], [b * 100], [ints], [ints > 0], [a.astype(np.float16)],
        ]),
        ("Cast-bool", node("Cast", ["x"], ["y"], to=TensorProto.BOOL), 19, [[a], [ints], [a]]),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "name, node, opset, runs", _misc_cases(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_reduce_softmax_cast_replan(
    name: str, node: onnx.NodeProto, opset: int, runs: list[list[Any]]
) -> None:
    node.name = f"my_{name}"
    check_sequence(node, runs, opset)


# --------------------------------------------------------------------------------------------
# Control flow: bodies bound to the node's implicit inputs


def test_if_branches_read_outer_values_by_name(rng: Any) -> None:
    """Each branch reads its own subset of outer values, in its own order."""
    f = TensorProto.FLOAT
    then = helper.make_graph(
        [helper.make_node("Sub", ["b", "a"], ["t"])], "then", [],
        [helper.make_tensor_value_info("t", f, [3])],
    )  # fmt: skip
    other = helper.make_graph(
        [helper.make_node("Mul", ["c", "a"], ["e"])], "else", [],
        [helper.make_tensor_value_info("e", f, [3])],
    )  # fmt: skip
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)
    ins = [helper.make_tensor_value_info(n, f, [3]) for n in "abc"]
    ins.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", f, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    sess = turnout.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a, b, c = f32(rng, 3), f32(rng, 3), f32(rng, 3)
    for cond in (True, False, np.array([True]), False, True):
        got = sess.run(None, {"a": a, "b": b, "c": c, "cond": np.asarray(cond).reshape(())})
        assert_identical(got, [b - a if cond else c * a])
    with pytest.raises(InvalidArgument):
        sess.run(None, {"a": a, "b": b, "c": c, "cond": np.zeros((), np.float32)[None][:0]})


@pytest.mark.parametrize(
    "op, peepholes", [("RNN", False), ("GRU", False), ("LSTM", False), ("LSTM", True)]
)
def test_bidirectional_is_its_two_directions_bitwise(op: str, peepholes: bool, rng: Any) -> None:
    """Both directions step as one batch of two: each half must be exactly the single-direction
    op on its own weights."""
    gates, hs, isz, steps, batch = {"RNN": 1, "GRU": 3, "LSTM": 4}[op], 7, 5, 4, 3
    x = f32(rng, steps, batch, isz)
    w, r, b = f32(rng, 2, gates * hs, isz), f32(rng, 2, gates * hs, hs), f32(rng, 2, 2 * gates * hs)
    h0 = f32(rng, 2, batch, hs)
    extra = {"LSTM": [f32(rng, 2, batch, hs)], "GRU": [], "RNN": []}[op]
    if peepholes:
        extra.append(f32(rng, 2, 3 * hs))
    names = ["x", "w", "r", "b", "", "h0", "c0", "p"][: 6 + len(extra)]
    outs = ["y", "yh", "yc"][: 3 if op == "LSTM" else 2]

    def run(direction: str, d: slice) -> Sequence[Any]:
        node = helper.make_node(op, names, outs, hidden_size=hs, direction=direction)
        values = [x, w[d], r[d], b[d], None, h0[d], *[v[d] for v in extra]]
        return build(node, values, 18)(*values)

    both = run("bidirectional", slice(None))
    fwd, rev = run("forward", slice(0, 1)), run("reverse", slice(1, 2))
    for k in range(len(outs)):
        axis = 1 if k == 0 else 0
        assert_identical([np.take(both[k], [0], axis=axis)], [fwd[k]])
        assert_identical([np.take(both[k], [1], axis=axis)], [rev[k]])
