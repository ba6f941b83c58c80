"""A node the CPU provider refuses is refused with the same turnout error on every provider:
numba, OpenCL (PoCL here) and CuPy (its kernels on the emulated numpy backend), because each
computes Split's sizes, Slice's index, DepthToSpace's plan and its axes with
`turnout.sdk.semantics.shape` (issue 31).

Each case runs on one provider alone (fallback "error"), and the partition report must show the
node on that provider: a provider that declines the node is skipped with its reason, never run
on the CPU provider unnoticed. Before: OpenCL's Split took negative sizes and any
`num_outputs`, CuPy's wrapped the axis (`axis % ndim`), and the reduce and normalization
kernels of CuPy and the CPU provider wrote their own axis checks (one wrapped as well).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper as h

from turnout.graph import errors
from turnout.tools.testing import cpu_session, one_node_model, positional_inputs, provider_session

NUMBA = "NumbaExecutionProvider"
OPENCL = "OpenCLExecutionProvider"
CUPY_EMULATED = "CuPyEmulatedExecutionProvider"


PROVIDERS = pytest.mark.parametrize("provider_on", [NUMBA, OPENCL, CUPY_EMULATED], indirect=True)
"""Each case on each provider, the provider alone (see `provider_on` in conftest)."""


def _error(
    make: Callable[[onnx.ModelProto], Any], node: onnx.NodeProto, inputs: list[Any], opset: int
) -> Exception:
    """The error running `node` raises; its input shapes left unknown so that the bad shape
    or axis reaches the kernel. A provider that does not run the node itself fails the test:
    every provider here runs these ops (numba through the numpy kernels it claims)."""
    model = one_node_model(node, inputs, opset)
    for vi in model.graph.input:
        vi.type.tensor_type.ClearField("shape")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's own deprecation warnings for old opsets
        try:
            sess = make(model)
        except errors.FallbackError as e:
            pytest.fail(f"the provider declined the node, so its error went untested: {e}")
    placed = {a.node: a for a in sess.partition_report().assignments}[node.name]
    feeds = {n: v for n, v in zip(node.input, positional_inputs(node, inputs)) if n}
    try:
        sess.run(None, feeds)
    except Exception as e:  # the error itself is what is compared
        e.add_note(f"ran on {placed.provider} ({placed.source})")
        return e
    raise AssertionError(f"{node.op_type} ran on {placed.provider} with inputs it should refuse")


def _check(provider: str, node: onnx.NodeProto, inputs: list[Any], opset: int) -> None:
    cpu = _error(cpu_session, node, inputs, opset)
    got = _error(lambda m: _on(m, provider), node, inputs, opset)
    assert isinstance(cpu, errors.InvalidArgument), repr(cpu)
    assert type(got) is type(cpu), f"CPU raised {cpu!r}; {provider} raised {got!r}"


def _on(model: onnx.ModelProto, provider: str) -> Any:
    sess = provider_session(model, provider)
    placed = {a.provider for a in sess.partition_report().assignments}
    assert placed == {provider}, f"the node ran on {placed}, not on {provider} alone"
    return sess


def _i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


X5 = np.arange(5, dtype=np.float32)
X23 = np.arange(6, dtype=np.float32).reshape(2, 3)

# (input names, output count, attributes, inputs, opset)
SPLIT = [
    pytest.param(["x", "s"], 2, {}, [X5, _i64(-1, 6)], 13, id="negative-size"),
    pytest.param(["x"], 2, {"num_outputs": 3}, [X5], 18, id="num_outputs-not-output-count"),
    pytest.param(["x"], 2, {"num_outputs": 0}, [X5], 18, id="num_outputs-zero"),
    pytest.param(["x", "s"], 2, {}, [X5, _i64(2, 2)], 13, id="sizes-do-not-sum-to-dim"),
    pytest.param(["x"], 2, {"split": [2, 2]}, [X5], 11, id="attr-sizes-do-not-sum"),
    pytest.param(["x"], 2, {}, [X5], 13, id="equal-parts-do-not-divide"),
    pytest.param(["x"], 2, {"axis": 1}, [X5], 13, id="axis-out-of-range"),
    pytest.param(["x"], 2, {"axis": -2}, [X5], 18, id="negative-axis-out-of-range"),
]


@PROVIDERS
@pytest.mark.parametrize(("ins", "n_out", "attrs", "inputs", "opset"), SPLIT)
def test_split_refuses_as_the_cpu_provider(
    provider_on: str,
    ins: list[str],
    n_out: int,
    attrs: dict[str, Any],
    inputs: list[np.ndarray],
    opset: int,
) -> None:
    node = h.make_node("Split", ins, [f"y{i}" for i in range(n_out)], name="split0", **attrs)
    _check(provider_on, node, inputs, opset)


SLICE = [
    pytest.param([X23, _i64(0), _i64(1), _i64(2)], id="axis-out-of-range"),
    pytest.param([X23, _i64(0), _i64(1), _i64(-3)], id="negative-axis-out-of-range"),
    pytest.param([X23, _i64(0, 0), _i64(1, 1), _i64(1, -1)], id="duplicated-axes"),
    pytest.param([X23, _i64(0), _i64(1), _i64(0), _i64(0)], id="zero-step"),
    pytest.param([X23, _i64(0, 0), _i64(1)], id="lengths-differ"),
]


@PROVIDERS
@pytest.mark.parametrize("inputs", SLICE)
def test_slice_refuses_as_the_cpu_provider(provider_on: str, inputs: list[np.ndarray]) -> None:
    names = ["x", "starts", "ends", "axes", "steps"][: len(inputs)]
    _check(provider_on, h.make_node("Slice", names, ["y"], name="slice0"), inputs, 13)


@PROVIDERS
@pytest.mark.parametrize(
    ("op", "shape"),
    [
        pytest.param("DepthToSpace", (1, 6, 2, 2), id="d2s-channels-not-divisible"),
        pytest.param("DepthToSpace", (6, 2, 2), id="d2s-not-nchw"),
        pytest.param("SpaceToDepth", (1, 1, 3, 2), id="s2d-height-not-divisible"),
    ],
)
def test_depth_space_refuse_as_the_cpu_provider(
    provider_on: str, op: str, shape: tuple[int, ...]
) -> None:
    node = h.make_node(op, ["x"], ["y"], name="d2s0", blocksize=2)
    _check(provider_on, node, [np.zeros(shape, np.float32)], 13)


X234 = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
# an axis outside [-rank, rank) ([-rank, rank] where the op cuts the shape at it), or repeated
AXIS = [
    pytest.param("Squeeze", ["x", "a"], [X234[:1], _i64(3)], {}, 13, id="Squeeze"),
    pytest.param("Unsqueeze", ["x", "a"], [X234, _i64(4)], {}, 13, id="Unsqueeze"),
    pytest.param("Concat", ["x", "z"], [X234, X234], {"axis": 3}, 13, id="Concat"),
    pytest.param("Gather", ["x", "i"], [X234, _i64(0)], {"axis": -4}, 13, id="Gather"),
    pytest.param("ReduceSum", ["x", "a"], [X234, _i64(3)], {}, 13, id="ReduceSum"),
    pytest.param("ReduceMax", ["x"], [X234], {"axes": [-4]}, 13, id="ReduceMax"),
    pytest.param("ReduceSum", ["x", "a"], [X234, _i64(1, -2)], {}, 13, id="ReduceSum-repeated"),
    pytest.param("Unsqueeze", ["x", "a"], [X234, _i64(1, -4)], {}, 13, id="Unsqueeze-repeated"),
    pytest.param("Squeeze", ["x", "a"], [X234, _i64(1)], {}, 13, id="Squeeze-not-1"),
    pytest.param("ArgMax", ["x"], [X234], {"axis": 3}, 13, id="ArgMax"),
    pytest.param("CumSum", ["x", "a"], [X234, np.array(3, np.int64)], {}, 14, id="CumSum"),
    pytest.param("Softmax", ["x"], [X234], {"axis": 3}, 13, id="Softmax"),
    pytest.param("LogSoftmax", ["x"], [X234], {"axis": -4}, 13, id="LogSoftmax"),
    pytest.param("Softmax", ["x"], [X234], {"axis": 4}, 11, id="Softmax-coerced"),
    pytest.param("Flatten", ["x"], [X234], {"axis": 4}, 13, id="Flatten"),
    pytest.param(
        "LayerNormalization",
        ["x", "s"],
        [X234, np.ones(4, np.float32)],
        {"axis": 3},
        17,
        id="LayerNormalization",
    ),
]


@PROVIDERS
@pytest.mark.parametrize(("op", "ins", "inputs", "attrs", "opset"), AXIS)
def test_axis_out_of_range_refused_as_the_cpu_provider(
    provider_on: str,
    op: str,
    ins: list[str],
    inputs: list[np.ndarray],
    attrs: dict[str, Any],
    opset: int,
) -> None:
    node = h.make_node(op, ins, ["y"], name="axis0", **attrs)
    _check(provider_on, node, inputs, opset)
