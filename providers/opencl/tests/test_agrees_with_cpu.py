"""Inputs the CPU provider refuses are refused on OpenCL with the same error class, and the
inputs both accept give onnxruntime's values.

Before: a Conv or pool whose kernel is larger than its padded input gave a 0-size output on
OpenCL (the CPU provider raises), and Pad read edge/reflect/wrap values from the uncropped
input when negative pads crop: reflect on fewer than 2 elements ran instead of raising, and
wrap with a crop and a pad on one axis gave wrong values.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

from turnout.tools.testing import (
    assert_outputs_close,
    cpu_session,
    kernel_error,
    one_node_model,
    provider_session,
    run_onnxruntime,
)
from turnout_opencl.factory import OpenCLProviderFactory

AVAIL = OpenCLProviderFactory().probe()
pytestmark = pytest.mark.skipif(not AVAIL.ok, reason=f"no OpenCL device: {AVAIL.reason}")
EP = "OpenCLExecutionProvider"


def _both(node: onnx.NodeProto, inputs: list[np.ndarray]) -> tuple[object, object]:
    """(CPU result or exception, OpenCL result or exception) of one node."""
    model = one_node_model(node, inputs)
    feeds = {n: v for n, v in zip(node.input, inputs) if n}
    results: list[object] = []
    for make in (cpu_session, lambda m: provider_session(m, EP)):
        try:
            results.append(make(model).run(None, feeds))
        except Exception as e:  # the error itself is what is compared
            results.append(e)
    return results[0], results[1]


def _agree(node: onnx.NodeProto, inputs: list[np.ndarray], oracle: str = "ort") -> None:
    """Both raise the same error class, or both run and OpenCL gives the oracle's values:
    onnxruntime's, or the CPU provider's where onnxruntime refuses what the CPU provider runs."""
    cpu, ocl = _both(node, inputs)
    if isinstance(cpu, Exception):
        assert isinstance(ocl, Exception), f"CPU raised {cpu!r}; OpenCL returned {ocl!r}"
        assert type(ocl) is type(cpu), f"CPU raised {cpu!r}; OpenCL raised {ocl!r}"
        return
    assert not isinstance(ocl, Exception), f"CPU ran; OpenCL raised {ocl!r}"
    expected = run_onnxruntime(node, inputs) if oracle == "ort" else cpu
    assert_outputs_close(expected, ocl)  # type: ignore[arg-type]


X = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)


@pytest.mark.parametrize(
    "w,attrs",
    [
        ((1, 1, 5, 5), {}),  # kernel larger than the input: CPU raises
        ((1, 1, 4, 4), {"auto_pad": "VALID"}),
        ((1, 1, 2, 2), {"dilations": [3, 3]}),  # the dilated kernel is too large
        ((1, 1, 4, 4), {"pads": [1, 0, 0, 0]}),
        ((1, 1, 5, 5), {"pads": [1, 1, 1, 1]}),  # fits once padded: runs
        ((1, 1, 2, 2), {"auto_pad": "BOGUS"}),
    ],
)
def test_conv_window_larger_than_input(w, attrs):
    weights = np.ones(w, np.float32)
    _agree(h.make_node("Conv", ["x", "w"], ["y"], **attrs), [X, weights])


def test_conv_bias_of_the_wrong_length():
    w, b = np.ones((1, 1, 2, 2), np.float32), np.ones(2, np.float32)
    _agree(h.make_node("Conv", ["x", "w", "b"], ["y"]), [X, w, b])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [4, 4]},
        {"kernel_shape": [4, 4], "ceil_mode": 1},
        {"kernel_shape": [4, 4], "pads": [1, 1, 1, 1]},  # fits once padded: runs
    ],
)
def test_pool_window_larger_than_input(op, attrs):
    _agree(h.make_node(op, ["x"], ["y"], **attrs), [X])


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize(
    "size,pads",
    [
        (4, [-1, 0]),
        (4, [-1, 2]),
        (4, [2, -1]),
        (6, [3, -2]),  # reflect/wrap read the 4 elements the crop leaves, not all 6
        (2, [-1, 1]),  # reflect: one element left to reflect: CPU raises
        (3, [-2, 1]),
        (1, [1, 1]),
        (3, [-1, -1]),
        (3, [-4, 1]),  # crops more than the input: CPU raises
    ],
)
def test_pad_negative_pads_crop_first(mode, size, pads):
    x = np.arange(size, dtype=np.float32)
    _agree(h.make_node("Pad", ["x", "p"], ["y"], mode=mode), [x, np.array(pads, np.int64)])


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_2d_crop_and_pad_on_both_axes(mode):
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    pads = np.array([-1, 2, 3, -2], np.int64)
    _agree(h.make_node("Pad", ["x", "p"], ["y"], mode=mode), [x, pads])


@pytest.mark.parametrize("size,pads", [(4, [3, -2]), (3, [0, 4])])
def test_pad_reflect_longer_than_the_input(size, pads):
    """The CPU provider reflects again (numpy's rule); onnxruntime refuses a reflect pad
    longer than the axis less one, so the CPU provider is the oracle here."""
    x = np.arange(size, dtype=np.float32)
    node = h.make_node("Pad", ["x", "p"], ["y"], mode="reflect")
    _agree(node, [x, np.array(pads, np.int64)], oracle="cpu")


X5 = np.arange(5, dtype=np.float32)


@pytest.mark.parametrize(
    "ins,n_out,attrs,inputs,opset",
    [
        (["x", "s"], 2, {}, [X5, np.array([-1, 6])], 13),  # a negative size
        (["x"], 2, {"num_outputs": 3}, [X5], 18),  # num_outputs is not the output count
        (["x"], 2, {}, [X5], 13),  # no even split
        (["x"], 2, {"split": [2, 2]}, [X5], 11),  # sizes that do not sum to the dim
        (["x"], 5, {"axis": 1}, [X5], 13),  # axis out of range
    ],
)
def test_split_refuses_as_the_cpu_provider(ins, n_out, attrs, inputs, opset):
    """Before: OpenCL ran negative sizes and a num_outputs other than the output count."""
    node = h.make_node("Split", ins, [f"y{i}" for i in range(n_out)], name="split0", **attrs)
    cpu = kernel_error(cpu_session, node, inputs, opset)
    ocl = kernel_error(lambda m: provider_session(m, EP), node, inputs, opset)
    assert type(ocl) is type(cpu) and str(ocl) == str(cpu)


@pytest.mark.parametrize(
    "inputs",
    [
        [X, np.array([0]), np.array([1]), np.array([0]), np.array([0])],  # a zero step
        [X, np.array([0]), np.array([1]), np.array([4])],  # axis out of range
        [X, np.array([0, 0]), np.array([1, 1]), np.array([2, -2])],  # a repeated axis
        [X, np.array([0, 0]), np.array([1])],  # lengths differ
    ],
)
def test_slice_refuses_as_the_cpu_provider(inputs):
    """Before: OpenCL let a repeated axis overwrite the first and zipped unequal lengths."""
    node = h.make_node("Slice", ["x", "starts", "ends", "axes", "steps"][: len(inputs)], ["y"])
    cpu = kernel_error(cpu_session, node, inputs, 13)
    ocl = kernel_error(lambda m: provider_session(m, EP), node, inputs, 13)
    assert type(ocl) is type(cpu) and str(ocl) == str(cpu)


@pytest.mark.parametrize(
    "op,x",
    [
        ("DepthToSpace", np.zeros((1, 6, 2, 2), np.float32)),  # C not divisible by 4
        ("SpaceToDepth", np.zeros((1, 1, 3, 2), np.float32)),  # H not divisible by 2
        ("DepthToSpace", np.zeros((4, 2, 2), np.float32)),  # not NCHW
    ],
)
def test_depth_space_refuse_as_the_cpu_provider(op, x):
    """Before: a tensor that is not 4-d failed OpenCL's unpacking with a ValueError."""
    node = h.make_node(op, ["x"], ["y"], blocksize=2)
    cpu = kernel_error(cpu_session, node, [x], 13)
    ocl = kernel_error(lambda m: provider_session(m, EP), node, [x], 13)
    assert type(ocl) is type(cpu) and str(ocl) == str(cpu)
