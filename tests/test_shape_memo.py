"""Shape chains (Shape/Size and integer ops on their values) run once per input shape."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.engine.executor.shape_memo import CHAIN_OP
from turnout.graph.errors import TurnoutError

OPSET = [helper.make_opsetid("", 17)]


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any]) -> bytes:
    graph = helper.make_graph(nodes, "shape_chains", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=OPSET).SerializeToString()


def _flatten_tail_model() -> bytes:
    """Y = Reshape(X, [X.shape[0], -1]) written as an exporter writes it: Shape -> Gather ->
    Unsqueeze -> Concat -> Reshape, on a tensor of dynamic shape."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", "c", "w"])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "rest"),
    ]
    nodes = [
        helper.make_node("Relu", ["X"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather"),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "rest"], ["target"], axis=0, name="concat"),
        helper.make_node("Reshape", ["r", "target"], ["Y"], name="reshape"),
    ]
    return _model(nodes, [x], [y], inits)


def _session(model: bytes, **options: Any) -> turnout.InferenceSession:
    so = turnout.SessionOptions()
    for k, v in options.items():
        setattr(so, k, v)
    return turnout.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _chains(sess: turnout.InferenceSession) -> list[Any]:
    return [st for st in sess._engine.plan.run_steps if st.op_type == CHAIN_OP]


def test_a_shape_chain_is_one_step_and_follows_the_shape() -> None:
    sess = _session(_flatten_tail_model())
    (chain,) = _chains(sess)
    assert chain.inputs == ("r",) and chain.outputs == ("target",)
    assert len(sess._engine.plan.run_steps) == len(sess._engine.plan.steps) - 3
    rng = np.random.default_rng(0)
    for shape in [(2, 3, 4), (5, 1, 2), (2, 3, 4), (1, 7, 3), (5, 1, 2)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = sess.run(None, {"X": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(shape[0], -1))


def test_profiled_runs_time_every_node_of_a_chain() -> None:
    sess = _session(_flatten_tail_model(), enable_profiling=True)
    sess.run(None, {"X": np.ones((2, 3, 4), np.float32)})
    import json

    with open(sess.end_profiling()) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    timed = {e["name"] for e in events if e.get("cat") == "Node"}
    assert {"shape", "gather", "unsqueeze", "concat"} <= {n.split("_kernel")[0] for n in timed}


def test_a_failing_node_in_a_chain_is_named() -> None:
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, None)  # any rank
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("Shape", ["X"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "one"], ["d"], name="pick_dim"),
        helper.make_node("Unsqueeze", ["d", "axes"], ["d1"], name="unsqueeze"),
        helper.make_node("Expand", ["X", "d1"], ["Y"], name="expand"),
    ]
    sess = _session(_model(nodes, [x], [y], inits))
    assert len(_chains(sess)) == 1
    sess.run(None, {"X": np.ones((2, 3), np.float32)})
    with pytest.raises(TurnoutError, match="pick_dim"):  # rank 1: Gather's index 1 is out
        sess.run(None, {"X": np.ones((3,), np.float32)})


def test_a_remembered_value_handed_out_stays_remembered() -> None:
    """A chain's value that leaves the graph (through an If) is the caller's own copy: writing
    to it changes nothing the next run computes."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", "c"])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("Y", TensorProto.INT64, None)
    inits = [numpy_helper.from_array(np.array([10], np.int64), "ten")]
    branch_out = helper.make_tensor_value_info("b", TensorProto.INT64, None)
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["shape_plus"], ["b"])], "then", [], [branch_out]
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["ten"], ["b"])], "else", [], [branch_out]
    )
    nodes = [
        helper.make_node("Shape", ["X"], ["s"], name="shape"),
        helper.make_node("Add", ["s", "ten"], ["shape_plus"], name="add"),
        helper.make_node("If", ["cond"], ["Y"], then_branch=then_g, else_branch=else_g),
    ]
    sess = _session(_model(nodes, [x, cond], [y], inits))
    assert len(_chains(sess)) == 1
    feed = {"X": np.ones((2, 3), np.float32), "cond": np.array(True)}
    (first,) = sess.run(None, feed)
    first[:] = -1  # the caller's array: writable, and not the remembered one
    (again,) = sess.run(None, feed)
    np.testing.assert_array_equal(again, [12, 13])


def test_chains_need_a_shape_and_keep_graph_outputs_out() -> None:
    """Arithmetic on inputs is no chain; a node producing a graph output stays its own step."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"])
    k = helper.make_tensor_value_info("K", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("Y", TensorProto.INT64, None)
    z = helper.make_tensor_value_info("Z", TensorProto.INT64, None)
    nodes = [
        helper.make_node("Add", ["K", "K"], ["k2"], name="add_inputs"),
        helper.make_node("Mul", ["k2", "K"], ["Z"], name="mul_inputs"),
        helper.make_node("Shape", ["X"], ["s"], name="shape"),
        helper.make_node("Add", ["s", "s"], ["Y"], name="add_out"),
    ]
    sess = _session(_model(nodes, [x, k], [y, z], []))
    assert _chains(sess) == []
    y_, z_ = sess.run(None, {"X": np.ones(4, np.float32), "K": np.array([3], np.int64)})
    np.testing.assert_array_equal(y_, [8])
    np.testing.assert_array_equal(z_, [18])


def test_chains_across_two_tensors_key_on_both() -> None:
    """A later chain reading an earlier one's value recomputes when that value changes."""
    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, ["p", "q"])
    b = helper.make_tensor_value_info("B", TensorProto.FLOAT, ["r"])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(np.array([0], np.int64), "axes")]
    nodes = [
        helper.make_node("Shape", ["A"], ["sa"], name="shape_a"),
        helper.make_node("ReduceProd", ["sa"], ["pa"], keepdims=1, name="prod_a"),
        helper.make_node("Relu", ["B"], ["rb"], name="relu_b"),
        helper.make_node("Shape", ["rb"], ["sb"], name="shape_b"),
        helper.make_node("Add", ["pa", "sb"], ["total"], name="add"),
        helper.make_node("ConstantOfShape", ["total"], ["Y"], name="fill"),
    ]
    sess = _session(_model(nodes, [a, b], [y], inits))
    chains = _chains(sess)
    assert len(chains) == 2 and "pa" in chains[1].inputs
    for shape_a, n_b in [((2, 3), 4), ((2, 3), 5), ((1, 1), 5), ((2, 3), 4)]:
        (out,) = sess.run(None, {"A": np.ones(shape_a, np.float32), "B": np.ones(n_b, np.float32)})
        assert out.shape == (int(np.prod(shape_a)) + n_b,)


def test_shape_parameters_fed_and_changed_in_place_are_read_again() -> None:
    """Reshape, Slice and Unsqueeze trust their memo on a read-only parameter's identity
    (an initializer, a chain's value); a fed parameter is writable: the caller may change it
    in place between runs, and the next run reads the new values."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 6])
    target = helper.make_tensor_value_info("target", TensorProto.INT64, [2])
    ends = helper.make_tensor_value_info("ends", TensorProto.INT64, [1])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "RSU"]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "start")]
    nodes = [
        helper.make_node("Reshape", ["X", "target"], ["R"], name="reshape"),
        helper.make_node("Slice", ["X", "start", "ends"], ["S"], name="slice"),
        helper.make_node("Unsqueeze", ["X", "axes"], ["U"], name="unsqueeze"),
    ]
    sess = _session(_model(nodes, [x, target, ends, axes], outs, inits))
    feed = {
        "X": np.arange(12, dtype=np.float32).reshape(2, 6),
        "target": np.array([3, 4], np.int64),
        "ends": np.array([1], np.int64),
        "axes": np.array([0], np.int64),
    }
    for _ in range(2):  # the second run may take the memo
        r, s, u = sess.run(None, feed)
    assert r.shape == (3, 4) and s.shape == (1, 6) and u.shape == (1, 2, 6)
    feed["target"][:] = [4, 3]
    feed["ends"][:] = [2]
    feed["axes"][:] = [2]
    r, s, u = sess.run(None, feed)
    assert r.shape == (4, 3) and s.shape == (2, 6) and u.shape == (2, 6, 1)
