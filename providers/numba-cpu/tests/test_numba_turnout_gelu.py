"""The optimizer's Gelu below opset 20 (`ai.turnout::Gelu`, fused from Erf * 0.5 * x) runs on
numba's generated kernels (alone or fused with its neighbours), not on the numpy erf."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.tools.testing import cpu_session

pytestmark = pytest.mark.cpu_means_host


def _erf_gelu() -> bytes:
    """y = 0.5 * x * (1 + erf(x / sqrt 2)) + 1, opset 17: the optimizer fuses the Gelu."""
    c = lambda name, v: helper.make_tensor(name, TensorProto.FLOAT, [], [v])  # noqa: E731
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["x", "p"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"]),
        helper.make_node("Add", ["g", "one"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
        [c("sqrt2", float(np.sqrt(2.0))), c("one", 1.0), c("half", 0.5)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # value_info as exporters write it: the fused Gelu's output keeps its type (turnout's
    # shape inference does not infer ai.turnout::Gelu on its own yet)
    return bytes(onnx.shape_inference.infer_shapes(model).SerializeToString())


def test_turnout_gelu_runs_fused_on_numba() -> None:
    sess = turnout.InferenceSession(_erf_gelu(), providers=["numba"])
    gelu = [a for a in sess.partition_report().assignments if a.op_type == "Gelu"]
    assert gelu and all(a.provider == "NumbaExecutionProvider" for a in gelu)
    assert all(a.source in ("numba", "fused") for a in gelu)  # never the numpy kernel
    x = np.linspace(-4, 4, 256, dtype=np.float32).reshape(4, 64)
    want = cpu_session(onnx.load_from_string(_erf_gelu())).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-6, atol=1e-6)


def test_the_model_has_the_fused_op() -> None:
    opts = turnout.SessionOptions()
    opts.optimized_model_filepath = ""
    sess = turnout.InferenceSession(_erf_gelu(), opts, providers=["numba"])
    ops = {(n.domain, n.op_type) for n in onnx.load_from_string(
        sess._engine.model.SerializeToString()).graph.node}  # fmt: skip
    assert ("ai.turnout", "Gelu") in ops
