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
from turnout.errors import InvalidArgument
from turnout.ir import Graph, schema_since_version
from turnout.provider import KernelNode
from turnout.providers.cpu import kernels as _kernels  # noqa: F401 - registers them
from turnout.providers.cpu.registry import CPU_KERNELS
from turnout.testing import one_node_model, positional_inputs

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
