"""Each node an optimizer pass writes names the model's nodes it replaces (its provenance),
and `turnout explain` prints them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.engine.evaluate import optimize
from turnout.optimizer import Level
from turnout.tools.cli import main

F = TensorProto.FLOAT


def _conv_relu(tag: str, x: str, y: str) -> list[onnx.NodeProto]:
    return [
        helper.make_node("Conv", [x, f"w_{tag}"], [f"c_{tag}"], name=f"conv_{tag}", pads=[1, 1]),
        helper.make_node("Relu", [f"c_{tag}"], [y], name=f"relu_{tag}"),
    ]


def _model() -> onnx.ModelProto:
    """Two Conv + Relu blocks reading the same input, and a third after the first."""
    rng = np.random.default_rng(0)
    w = {t: rng.standard_normal((2, 2, 3)).astype(np.float32) for t in "abc"}
    nodes = [*_conv_relu("a", "x", "ya"), *_conv_relu("b", "x", "yb"), *_conv_relu("c", "ya", "yc")]
    nodes.append(helper.make_node("Add", ["yb", "yc"], ["y"]))  # unnamed: goes by Add_6
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 2, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(v, f"w_{t}") for t, v in w.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_each_fused_node_names_only_its_own_sources() -> None:
    out, report = optimize(_model(), Level.ALL)
    fused = {n.input[1]: n.name for n in out.graph.node if n.op_type == "FusedConv"}
    assert len(fused) == 3
    for tag in "abc":
        assert report.provenance[fused[f"w_{tag}"]] == [f"conv_{tag}", f"relu_{tag}"]
    assert set(report.provenance) == set(fused.values())  # Add is the model's own
    assert report.to_dict()["provenance"] == report.provenance
    assert f"{fused['w_a']} <- conv_a, relu_a" in report.format()


def test_basic_level_writes_no_fused_nodes() -> None:
    _, report = optimize(_model(), Level.BASIC)
    assert report.provenance == {}


def test_explain_prints_the_provenance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    assert main(["explain", str(path)]) == 0
    text = capsys.readouterr().out
    assert "nodes the optimizer wrote" in text
    assert "<- conv_b, relu_b" in text


def _folded_model(tail: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    """x -> Conv `conv` (weights w, 3 channels) -> `tail` -> y."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 2, 3)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1]), *tail],
        "g",
        [helper.make_tensor_value_info("x", F, [1, 2, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(w, "w"), *inits],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _bn_relu_model() -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    stats = {
        "scale": rng.uniform(0.5, 2, 3),
        "bias": rng.standard_normal(3),
        "mean": rng.standard_normal(3),
        "var": rng.uniform(0.5, 2, 3),
    }
    bn = helper.make_node("BatchNormalization", ["c", *stats], ["b"], name="bn")
    relu = helper.make_node("Relu", ["b"], ["y"], name="relu")
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in stats.items()]
    return _folded_model([bn, relu], inits)


def test_conv_that_absorbed_a_batchnorm_names_it() -> None:
    """fold_conv_bn edits the Conv in place: the Conv now stands for itself and the BN. The
    Relu, only rewired to read the Conv, stands for nothing new."""
    out, report = optimize(_bn_relu_model(), Level.BASIC)
    assert [n.op_type for n in out.graph.node] == ["Conv", "Relu"]
    assert report.provenance == {"conv": ["bn", "conv"]}


def test_fused_conv_keeps_the_folded_batchnorm() -> None:
    """The folded Conv's sources pass on when Conv + Relu later become one FusedConv."""
    out, report = optimize(_bn_relu_model(), Level.ALL)
    (fused,) = [n.name for n in out.graph.node if n.op_type == "FusedConv"]
    assert report.provenance == {fused: ["bn", "conv", "relu"]}


def test_conv_that_absorbed_mul_and_add_names_both() -> None:
    scale = numpy_helper.from_array(np.array([[2.0], [0.5], [3.0]], np.float32), "s")
    shift = numpy_helper.from_array(np.array([[1.0], [-1.0], [0.25]], np.float32), "t")
    tail = [
        helper.make_node("Mul", ["c", "s"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "t"], ["y"], name="add"),
    ]
    out, report = optimize(_folded_model(tail, [scale, shift]), Level.BASIC)
    assert [n.op_type for n in out.graph.node] == ["Conv"]
    assert report.provenance == {"conv": ["add", "conv", "mul"]}


def test_explain_prints_the_folded_batchnorm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bn.onnx"
    onnx.save(_bn_relu_model(), path)
    assert main(["explain", str(path)]) == 0
    assert "<- bn, conv, relu" in capsys.readouterr().out


def _tracked_edit(reports_edits: bool) -> dict[str, list[str]]:
    """A pass that changes Neg q to Abs in place and reports no change, then a pass that
    removes Relu p and rewires q to p's input: what provenance records."""
    from turnout.optimizer.provenance import Tracker

    p = helper.make_node("Relu", ["x"], ["u"], name="p")
    q = helper.make_node("Neg", ["u"], ["v"], name="q")
    nodes = [p, q]
    sources: dict[str, list[str]] = {}
    tracker = Tracker({id(n): (n, n.name) for n in nodes}, sources)
    tracker.before(nodes)
    q.op_type = "Abs"  # an edit the pass leaves uncounted
    tracker.after(nodes, nodes, 0, reports_edits)
    tracker.before(nodes)
    q.input[0] = "x"  # only rewired: joins nothing
    tracker.after(nodes, [q], 1, True)
    return sources


def test_a_pass_that_may_edit_silently_is_followed_by_a_new_snapshot() -> None:
    # a plugin's pass (no reports_edits): its edit is not taken for the next pass's
    assert _tracked_edit(reports_edits=False) == {}
    # a pass promising to report its edits keeps the snapshot: had it edited silently, the
    # next pass would be charged with the op change and q would stand for p too
    assert _tracked_edit(reports_edits=True) == {"q": ["p", "q"]}
