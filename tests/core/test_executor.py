"""The executor: errors name the node, values are freed, runs are cancellable and thread-safe."""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.engine.executor.plan import Plan, RunTerminated, Step
from turnout.graph.errors import InvalidArgument, RuntimeException


def _chain_model(n: int) -> onnx.ModelProto:
    nodes = []
    prev = "x"
    for i in range(n):
        op = ("Relu", "Neg", "Abs")[i % 3]
        nodes.append(helper.make_node(op, [prev], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [8])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reference(x: np.ndarray, n: int) -> np.ndarray:
    for i in range(n):
        x = (lambda v: np.maximum(v, 0), np.negative, np.abs)[i % 3](x)
    return x


def test_chain_matches_numpy() -> None:
    sess = turnout.InferenceSession(_chain_model(50))
    x = np.random.default_rng(1).standard_normal(8).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, _reference(x, 50))


def test_values_are_freed_after_last_use() -> None:
    alive: list[Any] = []

    class Tracked(np.ndarray):
        pass

    def produce(x: Any) -> tuple[Any]:
        out = (x + 1).view(Tracked)
        alive.append(weakref.ref(out))
        return (out,)

    seen_alive: list[bool] = []

    def check(x: Any) -> tuple[Any]:
        # By the time the third step runs, the first intermediate must be gone.
        seen_alive.append(alive[0]() is not None)
        return (np.asarray(x) * 2,)

    steps = [
        Step("a", "A", "test", produce, ("x",), ("t0",)),
        Step("b", "B", "test", lambda t: (np.asarray(t) + 0,), ("t0",), ("t1",)),
        Step("c", "C", "test", check, ("t1",), ("y",)),
    ]
    plan = Plan("g", steps, ["x"], [], ["y"], {})
    plan.run(np.zeros(3))
    assert seen_alive == [False]
    # The profiled run releases them too: a profile that held every intermediate measured
    # page faults the plain run does not have (yolo-sized models: 25 ms a run).
    alive.clear()
    plan.run_profiled([np.zeros(3)], lambda *_: None)
    assert seen_alive == [False, False]


def test_profiled_run_hands_dead_values_to_their_allocator() -> None:
    freed: list[str] = []
    steps = [
        Step("a", "A", "t", lambda x: (x + 1,), ("x",), ("t0",), free=lambda v: freed.append("t0")),
        Step("b", "B", "t", lambda t: (t * 2,), ("t0",), ("y",), free=lambda v: freed.append("y")),
    ]
    plan = Plan("g", steps, ["x"], [], ["y"], {})
    (y,) = plan.run_profiled([np.zeros(2)], lambda *_: None)
    assert freed == ["t0"]  # the output is the caller's, never freed
    np.testing.assert_array_equal(y, [2.0, 2.0])


def test_kernel_error_names_node_and_provider() -> None:
    def boom(x: Any) -> tuple[Any]:
        raise ZeroDivisionError("bad")

    steps = [
        Step("first", "Relu", "test", lambda x: (x,), ("x",), ("t",)),
        Step("second", "Boom", "TestProvider", boom, ("t",), ("y",)),
    ]
    plan = Plan("g", steps, ["x"], [], ["y"], {})
    with pytest.raises(RuntimeException, match=r"node 'second' \(Boom\) on TestProvider"):
        plan.run(np.zeros(1))


def test_bad_index_is_invalid_argument_naming_node() -> None:
    g = helper.make_graph(
        [helper.make_node("Gather", ["data", "idx"], ["y"], name="lookup")],
        "g",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    sess = turnout.InferenceSession(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    )
    with pytest.raises(InvalidArgument, match="lookup"):
        sess.run(None, {"data": np.zeros(3, np.float32), "idx": np.array([7])})


def test_terminate_cancels_run() -> None:
    sess = turnout.InferenceSession(_chain_model(40))
    ro = turnout.RunOptions()
    ro.terminate = True
    with pytest.raises(RunTerminated):
        sess.run(None, {"x": np.zeros(8, np.float32)}, ro)


def test_concurrent_runs_are_independent() -> None:
    sess = turnout.InferenceSession(_chain_model(30))
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(8).astype(np.float32) for _ in range(8)]
    errors: list[str] = []

    def worker(x: np.ndarray) -> None:
        for _ in range(40):
            (y,) = sess.run(None, {"x": x})
            if not np.array_equal(y, _reference(x, 30)):
                errors.append("mismatch")

    threads = [threading.Thread(target=worker, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_only_execute_path_to_fetches_skips_other_branches() -> None:
    calls: list[str] = []
    steps = [
        Step("a", "A", "t", lambda x: (calls.append("a") or x,), ("x",), ("ya",)),
        Step("b", "B", "t", lambda x: (calls.append("b") or x,), ("x",), ("yb",)),
    ]
    plan = Plan("g", steps, ["x"], [], ["ya", "yb"], {})
    (ya,) = plan.pruned(("ya",)).run(np.ones(1))
    assert calls == ["a"]
    np.testing.assert_array_equal(ya, np.ones(1))


def test_initializer_outputs_are_copies() -> None:
    w = np.arange(3, dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    sess = turnout.InferenceSession(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    )
    (y,) = sess.run(None, {})
    y[0] = 100
    (y2,) = sess.run(None, {})
    assert y2[0] == 0


@pytest.mark.parametrize("numpy_only", ["0", "1"])
def test_if_branches_are_planned_once_not_per_run(
    monkeypatch: pytest.MonkeyPatch, numpy_only: str
) -> None:
    """vad_like's If branches (partitioned, kernels built, straight-line code generated) are
    planned when the If kernel is built; later runs at the same shapes plan nothing and call
    the branch's generated function with the outer values as arguments, no dict between."""
    import turnout.engine.executor.build as build
    from turnout_testbed.apps import vad_feeds, vad_like

    opts = turnout.SessionOptions()
    opts.add_session_config_entry("session.turnout.cpu_numpy_only", numpy_only)
    sess = turnout.InferenceSession(
        vad_like().SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    feeds = vad_feeds()
    first = sess.run(None, feeds)
    planned: list[str] = []
    original = build.build_plan

    def counting(graph: Any, *args: Any, **kwargs: Any) -> Plan:
        planned.append(graph.name)
        return original(graph, *args, **kwargs)

    monkeypatch.setattr(build, "build_plan", counting)
    bound: list[Any] = []
    monkeypatch.setattr(build.BoundRunner, "__call__", lambda *a: bound.append(a))
    for _ in range(3):
        again = sess.run(None, feeds)
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)
    assert planned == [] and bound == []
    # the counter sits on the path that plans them: a new session plans both branches
    turnout.InferenceSession(
        vad_like().SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    assert {"If_0_then_branch/branch", "If_0_else_branch/branch"} <= set(planned)
