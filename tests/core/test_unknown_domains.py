"""Operator domains nobody defines: refused at load, naming the node and the switch; loaded
when the session sets `session.turnout.allow_unknown_domains=1`, the node then failing only
when it runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.errors import Fail, InvalidArgument, NotImplemented
from turnout.graph.model import ALLOW_UNKNOWN_DOMAINS_KEY


def _unknown_domain_model() -> onnx.ModelProto:
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="frob"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_empty_tensor_value_info(o) for o in ("a", "y")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    return helper.make_model(g, opset_imports=opsets)


def test_unknown_domain_is_refused_and_the_error_names_the_switch() -> None:
    with pytest.raises(Fail, match=f"frob.*{ALLOW_UNKNOWN_DOMAINS_KEY}=1"):
        turnout.InferenceSession(_unknown_domain_model().SerializeToString())


def test_unknown_domain_loads_when_asked_and_fails_only_when_the_node_runs() -> None:
    so = turnout.SessionOptions()
    so.add_session_config_entry(ALLOW_UNKNOWN_DOMAINS_KEY, "1")
    sess = turnout.InferenceSession(_unknown_domain_model().SerializeToString(), so)
    placed = {a.node: a.source for a in sess.partition_report().assignments}
    assert placed["frob"] == "no kernel"
    with pytest.raises(NotImplemented, match=r"'frob' \(com\.example::Frobnicate\) has no kernel"):
        sess.run(None, {"x": np.ones(2, np.float32)})


def test_allow_unknown_domains_takes_0_or_1() -> None:
    so = turnout.SessionOptions()
    so.add_session_config_entry(ALLOW_UNKNOWN_DOMAINS_KEY, "yes")
    with pytest.raises(InvalidArgument, match=ALLOW_UNKNOWN_DOMAINS_KEY):
        turnout.InferenceSession(_unknown_domain_model().SerializeToString(), so)
