"""A node the CPU provider refuses is refused by the CuPy kernels (on the emulated backend) with
the same `InvalidArgument`, because both compute it with `turnout.sdk.semantics`.

Before: CuPy's Split wrapped the axis with `axis % ndim` and split unevenly where the CPU
provider (and onnx's schema) refuse; negative sizes ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper as h

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import cpu_session, kernel_error, provider_session

X5 = np.arange(5, dtype=np.float32)
SPLIT_CASES = [
    pytest.param(["x", "s"], 2, {}, [X5, np.array([-1, 6])], 13, id="negative-size"),
    pytest.param(["x"], 2, {"num_outputs": 3}, [X5], 18, id="num_outputs-mismatch"),
    pytest.param(["x"], 2, {}, [X5], 13, id="uneven"),
    pytest.param(["x"], 2, {"split": [2, 2]}, [X5], 11, id="sizes-do-not-sum"),
    pytest.param(["x"], 5, {"axis": 1}, [X5], 13, id="axis-out-of-range"),
    pytest.param(["x"], 5, {"axis": -2}, [X5], 13, id="negative-axis-out-of-range"),
]


@pytest.mark.parametrize(("ins", "n_out", "attrs", "inputs", "opset"), SPLIT_CASES)
def test_split_raises_as_the_cpu_provider(
    ins: list[str],
    n_out: int,
    attrs: dict[str, Any],
    inputs: list[np.ndarray],
    opset: int,
    emulated: str,
) -> None:
    outs = [f"y{i}" for i in range(n_out)]
    node = h.make_node("Split", ins, outs, name="split0", **attrs)
    cpu = kernel_error(cpu_session, node, inputs, opset)
    gpu = kernel_error(lambda m: provider_session(m, emulated), node, inputs, opset)
    assert isinstance(cpu, InvalidArgument), repr(cpu)
    assert type(gpu) is type(cpu) and str(gpu) == str(cpu)


def _i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


X23 = np.zeros((2, 3), np.float32)
SLICE_CASES = [
    pytest.param([X23, _i64(0), _i64(1), _i64(0), _i64(0)], id="zero-step"),
    pytest.param([X23, _i64(0), _i64(1), _i64(2)], id="axis-out-of-range"),
    pytest.param([X23, _i64(0, 0), _i64(1, 1), _i64(1, -1)], id="repeated-axis"),
    pytest.param([X23, _i64(0, 0), _i64(1)], id="lengths-differ"),
]


@pytest.mark.parametrize("inputs", SLICE_CASES)
def test_slice_raises_as_the_cpu_provider(inputs: list[np.ndarray], emulated: str) -> None:
    """Before: CuPy wrapped the axis (axis % ndim), let a repeated axis overwrite the first,
    and zipped starts and ends of different lengths."""
    names = ["x", "starts", "ends", "axes", "steps"][: len(inputs)]
    node = h.make_node("Slice", names, ["y"], name="slice0")
    cpu = kernel_error(cpu_session, node, inputs, 13)
    gpu = kernel_error(lambda m: provider_session(m, emulated), node, inputs, 13)
    assert isinstance(cpu, InvalidArgument), repr(cpu)
    assert type(gpu) is type(cpu) and str(gpu) == str(cpu)


@pytest.mark.parametrize(
    ("op", "x"),
    [
        ("DepthToSpace", np.zeros((1, 6, 2, 2), np.float32)),  # C not divisible by 4
        ("SpaceToDepth", np.zeros((1, 1, 3, 2), np.float32)),  # H not divisible by 2
        ("DepthToSpace", np.zeros((4, 2, 2), np.float32)),  # not NCHW
    ],
)
def test_depth_space_raise_as_the_cpu_provider(op: str, x: np.ndarray, emulated: str) -> None:
    """Before: CuPy reshaped without a check, so the error was numpy's ValueError, or none."""
    node = h.make_node(op, ["x"], ["y"], name="d2s0", blocksize=2)
    cpu = kernel_error(cpu_session, node, [x], 13)
    gpu = kernel_error(lambda m: provider_session(m, emulated), node, [x], 13)
    assert isinstance(cpu, InvalidArgument), repr(cpu)
    assert type(gpu) is type(cpu) and str(gpu) == str(cpu)


@pytest.mark.parametrize(
    ("op", "inputs", "attrs"),
    [
        ("TopK", [np.zeros((2, 3), np.float32), _i64(1)], {"axis": 2}),
        ("ArgMax", [np.zeros((2, 3), np.float32)], {"axis": -3}),
        ("GatherElements", [np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int64)], {"axis": 2}),
    ],
)
def test_axis_out_of_range_raises_as_the_cpu_provider(
    op: str, inputs: list[np.ndarray], attrs: dict[str, Any], emulated: str
) -> None:
    names = ["x", "k"][: len(inputs)] if op == "TopK" else ["x", "i"][: len(inputs)]
    outs = ["y", "idx"] if op == "TopK" else ["y"]
    node = h.make_node(op, names, outs, name="ax0", **attrs)
    cpu = kernel_error(cpu_session, node, inputs, 13)
    gpu = kernel_error(lambda m: provider_session(m, emulated), node, inputs, 13)
    assert isinstance(cpu, InvalidArgument), repr(cpu)
    assert type(gpu) is type(cpu), (cpu, gpu)
