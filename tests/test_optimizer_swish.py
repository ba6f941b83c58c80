"""fuse_activation with the activations of mobile and detector backbones: HardSwish, and SiLU
written as y * Sigmoid(y) ("Swish"), after Conv and Gemm; the fused kernels match the
unfused graph."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.api.options import SessionOptions
from turnout.api.session import InferenceSession
from turnout.engine.evaluate import optimize
from turnout.optimizer import Level
from turnout.tools.testing import assert_outputs_close

F = TensorProto.FLOAT


def _run(model: onnx.ModelProto, level: Level, feeds: dict[str, Any]) -> list[Any]:
    opts = SessionOptions()
    opts.graph_optimization_level = level  # type: ignore[assignment]
    sess = InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _act(kind: str, x: str, y: str) -> list[onnx.NodeProto]:
    if kind == "HardSwish":
        return [helper.make_node("HardSwish", [x], [y])]
    if kind == "silu":
        return [
            helper.make_node("Sigmoid", [x], [f"{x}_s"]),
            helper.make_node("Mul", [x, f"{x}_s"], [y]),
        ]
    assert kind == "silu_swapped"  # Mul(sigmoid, y): the operands in the other order
    return [
        helper.make_node("Sigmoid", [x], [f"{x}_s"]),
        helper.make_node("Mul", [f"{x}_s", x], [y]),
    ]


def _model(kind: str, extra_output: str = "") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((75, 5)).astype(np.float32), "gw"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        *_act(kind, "c", "a"),
        helper.make_node("Flatten", ["a"], ["f"]),
        helper.make_node("Gemm", ["f", "gw"], ["g"]),
        *_act(kind, "g", "y"),
    ]
    outputs = [helper.make_tensor_value_info("y", F, [2, 5])]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, F, None))
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", F, [2, 2, 5, 5])], outputs, inits
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("kind", ["HardSwish", "silu", "silu_swapped"])
def test_conv_and_gemm_fuse_the_activation(kind: str) -> None:
    m = _model(kind)
    fused, _ = optimize(m, Level.ALL)
    assert [n.op_type for n in fused.graph.node] == ["FusedConv", "Flatten", "FusedGemm"]
    want = "HardSwish" if kind == "HardSwish" else "Swish"
    for n in fused.graph.node[::2]:
        assert helper.get_attribute_value(n.attribute[-1]) == want.encode()
    x = np.random.default_rng(1).standard_normal((2, 2, 5, 5)).astype(np.float32) * 3
    assert_outputs_close(_run(m, Level.DISABLE, {"x": x}), _run(m, Level.ALL, {"x": x}), 1e-5, 1e-6)


@pytest.mark.parametrize("seen", ["c_s", "c"])
def test_silu_read_elsewhere_is_not_fused(seen: str) -> None:
    """The sigmoid (or the conv's output) is a graph output too: the pattern stays as written."""
    m = _model("silu", extra_output=seen)
    fused, _ = optimize(m, Level.ALL)
    ops = [n.op_type for n in fused.graph.node]
    assert ops[:3] == ["Conv", "Sigmoid", "Mul"], ops
    x = np.random.default_rng(1).standard_normal((2, 2, 5, 5)).astype(np.float32)
    assert_outputs_close(_run(m, Level.DISABLE, {"x": x}), _run(m, Level.ALL, {"x": x}), 1e-5, 1e-6)
