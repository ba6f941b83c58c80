"""Each node an optimizer pass writes names the model's nodes it replaces (its provenance),
and `turnout explain` prints them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.cli import main
from turnout.optimizer import Level, optimize

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
