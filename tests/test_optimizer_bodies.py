"""The extended passes run inside If/Loop/Scan bodies (`fuse_subgraphs`): a branch's Conv +
Relu becomes a FusedConv with its output type recorded, the model computes what onnxruntime
computes on the original, and a fusion nobody can run does not fire there either."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.api.options import SessionOptions
from turnout.api.session import InferenceSession
from turnout.engine.evaluate import optimize
from turnout.optimizer import TURNOUT_DOMAIN, Level

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT


def _conv_relu_branch(tag: str, w: np.ndarray) -> onnx.GraphProto:
    """A branch computing Relu(Conv(x, w_tag)) with its weight as a Constant node."""
    nodes = [
        helper.make_node("Constant", [], [f"w_{tag}"], value=numpy_helper.from_array(w)),
        helper.make_node("Conv", ["x", f"w_{tag}"], [f"c_{tag}"], pads=[1, 1]),
        helper.make_node("Relu", [f"c_{tag}"], [f"y_{tag}"]),
    ]
    out = [helper.make_tensor_value_info(f"y_{tag}", F, None)]
    return helper.make_graph(nodes, f"branch_{tag}", [], out)


def _if_model() -> onnx.ModelProto:
    """If(flag) over two Conv + Relu branches reading the outer input x; no value_info."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((4, 2, 3)).astype(np.float32)
    w2 = rng.standard_normal((4, 2, 3)).astype(np.float32)
    node = helper.make_node(
        "If",
        ["flag"],
        ["y"],
        then_branch=_conv_relu_branch("t", w1),
        else_branch=_conv_relu_branch("e", w2),
    )
    g = helper.make_graph(
        [node],
        "if_conv",
        [
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", F, [1, 2, 16]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _branches(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    return [a.g for n in model.graph.node for a in n.attribute if a.type == a.GRAPH]


def _feeds(flag: bool) -> dict[str, Any]:
    x = np.random.default_rng(5).standard_normal((1, 2, 16)).astype(np.float32)
    return {"flag": np.array(flag), "x": x}


def test_conv_relu_in_if_branches_fuses_and_keeps_its_type() -> None:
    out, report = optimize(_if_model(), Level.ALL)
    assert report.fired("fuse_subgraphs")
    assert any(o.domain == TURNOUT_DOMAIN for o in out.opset_import)
    for body in _branches(out):
        ops = [(n.domain, n.op_type) for n in body.node]
        assert ops == [(TURNOUT_DOMAIN, "FusedConv")], ops
        typed = {vi.name: vi.type.tensor_type.elem_type for vi in body.value_info}
        assert typed.get(body.node[0].output[0]) == F


def test_fused_branches_compute_what_onnxruntime_computes() -> None:
    model = _if_model()
    sess = InferenceSession(model.SerializeToString(), SessionOptions())
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for flag in (True, False):
        (got,) = sess.run(None, _feeds(flag))
        (want,) = ref.run(None, _feeds(flag))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_fusion_nobody_runs_does_not_fire_in_bodies() -> None:
    def no_fused_conv(domain: str, op_type: str, replaced: tuple[str, ...]) -> bool:
        return op_type != "FusedConv"

    out, report = optimize(_if_model(), Level.ALL, supports=no_fused_conv)
    assert not report.fired("fuse_subgraphs")
    for body in _branches(out):
        assert [n.op_type for n in body.node] == ["Conv", "Relu"]


def test_basic_level_leaves_bodies_unfused() -> None:
    out, report = optimize(_if_model(), Level.BASIC)
    assert "fuse_subgraphs" not in report.changes()
    for body in _branches(out):
        assert [n.op_type for n in body.node] == ["Conv", "Relu"]
