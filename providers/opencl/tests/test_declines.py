"""What an OpenCL kernel cannot do is declined in get_capability, with the reason, when the
shapes are known at session creation; what it can do runs and matches onnx.reference.

Before: LayerNormalization with axis=-3 and a per-channel scale (C, 1, 1) raised "scale
strides ... are not supported" in the run, as did a size-1 normalized dim or a bias broadcast
differently from the scale; Conv and pools with 4 spatial dims failed in the run too.
"""

from __future__ import annotations

import zlib

import numpy as np
import onnx
import pytest
from onnx import helper as h

import turnout
from turnout.tools.testing import (
    assert_outputs_close,
    one_node_model,
    provider_session,
    run_reference,
)
from turnout_opencl.factory import OpenCLProviderFactory

AVAIL = OpenCLProviderFactory().probe()
pytestmark = pytest.mark.skipif(not AVAIL.ok, reason=f"no OpenCL device: {AVAIL.reason}")
EP = "OpenCLExecutionProvider"


def _data(shape: tuple[int, ...]) -> np.ndarray:
    """Data that depends on the shape alone, never on which tests ran before."""
    return (
        np.random.default_rng(zlib.crc32(repr(shape).encode()))
        .standard_normal(shape)
        .astype(np.float32)
    )


def _runs_on_opencl(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> None:
    expected = run_reference(node, inputs, opset)
    sess = provider_session(one_node_model(node, inputs, opset), EP)  # fallback "error"
    feeds = {n: v for n, v in zip(node.input, inputs) if n}
    assert_outputs_close(expected, sess.run(None, feeds), rtol=1e-4, atol=1e-5)


def _declined(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> str:
    """The OpenCL decline reason; the node then runs on CPU and matches onnx.reference."""
    model = one_node_model(node, inputs, opset)
    sess = turnout.InferenceSession(
        model.SerializeToString(), providers=[EP, "CPUExecutionProvider"]
    )
    report = sess.partition_report()
    assert [a.provider for a in report.assignments] == ["CPUExecutionProvider"]
    feeds = {n: v for n, v in zip(node.input, inputs) if n}
    assert_outputs_close(run_reference(node, inputs, opset), sess.run(None, feeds), 1e-4, 1e-5)
    (decline,) = report.declines[EP]
    return decline["reason"]


NORM_RUNS = [
    ((2, 3, 4, 5), (3, 1, 1), (3, 1, 1)),  # axis=-3, per channel: the reported case
    ((2, 3, 4, 5), (3, 4, 1), None),
    ((2, 3, 1, 5), (3, 1, 5), (3, 1, 5)),  # a size-1 normalized dim
    ((2, 3, 4, 5), (3, 4, 5), (5,)),  # bias broadcast unlike the scale
    ((2, 3, 4, 5), (4, 5), (3, 1, 1)),
    ((2, 3, 4, 5), (1,), None),
]


@pytest.mark.parametrize("x,scale,bias", NORM_RUNS)
def test_layer_norm_axis_minus3_runs(x, scale, bias):
    inputs = [_data(x), _data(scale)] + ([_data(bias)] if bias else [])
    names = ["x", "s", "b"][: len(inputs)]
    node = h.make_node("LayerNormalization", names, ["y"], axis=-3)
    _runs_on_opencl(node, inputs, 18)


@pytest.mark.parametrize("x,scale,_", NORM_RUNS)
def test_rms_norm_axis_minus3_runs(x, scale, _):
    node = h.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-3)
    _runs_on_opencl(node, [_data(x), _data(scale)], 23)


@pytest.mark.parametrize("scale", [(1, 4, 1), (3, 1, 5)])
@pytest.mark.parametrize("op,opset", [("LayerNormalization", 18), ("RMSNormalization", 23)])
def test_norm_scale_the_kernel_cannot_index_is_declined(op, opset, scale):
    node = h.make_node(op, ["x", "s"], ["y"], axis=-3)
    reason = _declined(node, [_data((2, 3, 4, 5)), _data(scale)], opset)
    assert f"scale of shape {scale}" in reason and "not supported" in reason


def test_layer_norm_bias_the_kernel_cannot_index_is_declined():
    node = h.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-3)
    inputs = [_data((2, 3, 4, 5)), _data((3, 4, 5)), _data((1, 4, 1))]
    assert "bias of shape (1, 4, 1)" in _declined(node, inputs, 18)


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("Conv", {}),
        ("MaxPool", {"kernel_shape": [2, 2, 2, 2]}),
        ("AveragePool", {"kernel_shape": [2, 2, 2, 2]}),
        ("GlobalAveragePool", {}),
    ],
)
def test_four_spatial_dims_are_declined(op, attrs):
    x = _data((1, 2, 3, 3, 3, 3))
    inputs = [x, _data((2, 2, 2, 2, 2, 2))] if op == "Conv" else [x]
    node = h.make_node(op, ["x", "w"][: len(inputs)], ["y"], **attrs)
    assert "1-3 spatial dims" in _declined(node, inputs, 18)


def test_resize_above_the_kernel_rank_is_declined():
    x = _data((1,) * 7 + (2, 3))
    scales = np.array([1.0] * 7 + [2.0, 2.0], np.float32)
    node = h.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    assert "rank <= 8" in _declined(node, [x, None, scales], 19)
