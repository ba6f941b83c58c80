"""The per-run parts of `InferenceSession.run` made cheaper for sub-millisecond models: the
floating-point error state set without an np.errstate per run, and the outputs made owned
(`_owned_outputs`) without a function call per array. Behaviour as before."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.engine.executor.plan import ignore_fp_errors, restore_fp_errors
from turnout.engine.outputs import owned_outputs as _owned_outputs

F = TensorProto.FLOAT


def _session(
    nodes: list[onnx.NodeProto], outputs: list[str], inits: Sequence[onnx.TensorProto] = ()
) -> turnout.InferenceSession:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info(y, F, None) for y in outputs],
        list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return turnout.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_fp_state_is_ignored_in_a_run_and_restored_after() -> None:
    before = np.geterr()
    x = np.array([[1.0, 0.0, -1.0], [0.0, 2.0, 3.0]], np.float32)
    sess = _session([helper.make_node("Log", ["x"], ["y"])], ["y"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would raise here
        (y,) = sess.run(None, {"x": x})
    assert np.isneginf(y[0, 1]) and np.isnan(y[0, 2])
    assert np.geterr() == before


def test_fp_state_restored_after_a_failed_run() -> None:
    before = np.geterr()
    shape = numpy_helper.from_array(np.array([4, 4], np.int64), "s")
    sess = _session([helper.make_node("Reshape", ["x", "s"], ["y"])], ["y"], [shape])
    with pytest.raises(turnout.InvalidArgument):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert np.geterr() == before


def test_ignore_fp_errors_nests_and_is_per_thread() -> None:
    before = np.geterr()
    outer = ignore_fp_errors()
    inner = ignore_fp_errors()
    assert set(np.geterr().values()) == {"ignore"}
    seen: list[dict[str, str]] = []
    t = threading.Thread(target=lambda: seen.append(np.geterr()))
    t.start()
    t.join()
    assert seen == [before]  # another thread keeps its own state
    restore_fp_errors(inner)
    assert set(np.geterr().values()) == {"ignore"}
    restore_fp_errors(outer)
    assert np.geterr() == before


def test_owned_outputs_copies_what_aliases_a_feed_or_an_earlier_output() -> None:
    feed = np.arange(6, dtype=np.float32).reshape(2, 3)
    fresh = np.zeros(3, np.float32)
    view_of_feed = feed[1:]
    frozen = np.ones(2, np.float32)
    frozen.flags.writeable = False
    outs = _owned_outputs(
        (feed, view_of_feed, fresh, fresh[:2], frozen, np.float32(2.5), None, [frozen]),
        [feed, None],
    )
    assert outs[0] is not feed and np.array_equal(outs[0], feed)
    assert not np.shares_memory(outs[1], feed) and np.array_equal(outs[1], feed[1:])
    assert outs[2] is fresh  # the first output on a buffer keeps it
    assert not np.shares_memory(outs[3], fresh)
    assert outs[4].flags.writeable and np.array_equal(outs[4], frozen)
    assert isinstance(outs[5], np.ndarray) and outs[5].shape == () and outs[5] == 2.5
    assert outs[6] is None
    assert outs[7][0].flags.writeable


def test_identity_of_a_feed_is_returned_as_a_copy() -> None:
    x = np.ones((2, 3), np.float32)
    sess = _session(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["x"], ["z"])],
        ["y", "z"],
    )
    y, z = sess.run(None, {"x": x})
    assert not np.shares_memory(y, x) and not np.shares_memory(z, x)
    assert not np.shares_memory(y, z)


def test_feed_fast_path_takes_a_matching_array_as_it_is() -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, ["n", 3])],
        [helper.make_tensor_value_info("y", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = turnout.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.ones((5, 3), np.float32)
    assert sess._prepare_feeds({"x": x})[0] is x
    strided = np.ones((5, 6), np.float32)[:, ::2]
    assert sess._prepare_feeds({"x": strided})[0] is strided
    for bad, needle in [
        (np.ones((5, 4), np.float32), "Got invalid dimensions for input: x"),
        (np.ones((5, 3, 1), np.float32), "Invalid rank for input: x"),
        (np.ones((5, 3), np.float64), "Unexpected input data type"),
    ]:
        with pytest.raises(turnout.InvalidArgument, match=needle):
            sess.run(None, {"x": bad})
    sub = np.ones((2, 3), np.float32).view(np.recarray)  # a subclass: the full checks
    assert np.array_equal(sess.run(None, {"x": sub})[0], np.ones((2, 3), np.float32))
