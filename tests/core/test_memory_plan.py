"""Buffer reuse by lifetime: a plan releases each intermediate after its last reader, unless
`enable_mem_reuse` is off; the partition report and the profile give the peak per device."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.engine.executor.memory import peak_live_bytes, value_bytes
from turnout.engine.executor.plan import Step

N = 1000  # floats per value: 4000 bytes


def _chain(n: int) -> bytes:
    """x -> Relu -> Neg -> Relu -> ... (n nodes), every value [N] float32."""
    names = ["x", *[f"t{i}" for i in range(n - 1)], "y"]
    nodes = [
        helper.make_node("Relu" if i % 2 == 0 else "Neg", [names[i]], [names[i + 1]], name=f"n{i}")
        for i in range(n)
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


def _session(reuse: bool, profile: bool = False) -> turnout.InferenceSession:
    opts = turnout.SessionOptions()
    opts.enable_mem_reuse = reuse
    opts.enable_profiling = profile
    opts.graph_optimization_level = turnout.GraphOptimizationLevel.ORT_DISABLE_ALL
    return turnout.InferenceSession(_chain(6), opts, providers=["CPUExecutionProvider"])


def _step(name: str, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> Step:
    return Step(name, "Op", "P", lambda *a: a, inputs, outputs)


def test_peak_counts_what_lives_at_once() -> None:
    steps = [_step("a", ("x",), ("a",)), _step("b", ("a",), ("b",)), _step("c", ("b",), ("y",))]
    sizes = {"a": 10, "b": 20, "y": 5}
    on_cpu = lambda st: "cpu"  # noqa: E731
    assert peak_live_bytes(steps, sizes, on_cpu, {"y"}, release=True) == {"cpu": 30}
    assert peak_live_bytes(steps, sizes, on_cpu, {"y"}, release=False) == {"cpu": 35}


def test_values_never_read_are_released_at_once() -> None:
    steps = [_step("a", ("x",), ("a", "unused")), _step("b", ("a",), ("y",))]
    sizes = {"a": 10, "unused": 100, "y": 1}
    peak = peak_live_bytes(steps, sizes, lambda st: "cpu", {"y"}, release=True)
    assert peak == {"cpu": 110}  # it exists while its step runs, not after


def test_value_bytes() -> None:
    assert value_bytes(np.zeros(3, np.float64)) == 24
    assert value_bytes([np.zeros(2, np.int8), np.zeros(1, np.int32)]) == 6
    assert value_bytes("text") == 0


@pytest.mark.parametrize(("reuse", "peak"), [(True, 2 * 4 * N), (False, 6 * 4 * N)])
def test_report_gives_the_planned_peak(reuse: bool, peak: int) -> None:
    report = _session(reuse).partition_report()
    assert report.peak_bytes == {"cpu": peak} and report.unsized == 0
    assert "planned peak of intermediate values: cpu" in report.to_text()


def test_without_reuse_the_plan_releases_nothing() -> None:
    assert "= None" in _session(True)._engine.plan.source
    assert "= None" not in _session(False)._engine.plan.source


@pytest.mark.parametrize("reuse", [True, False])
def test_profile_records_the_measured_peak(reuse: bool) -> None:
    sess = _session(reuse, profile=True)
    x = np.linspace(-1, 1, N, dtype=np.float32)
    sess.run(None, {"x": x})
    with open(sess.end_profiling()) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    (peak,) = [e["args"]["bytes"] for e in events if e.get("name") == "peak_memory"]
    assert peak == _session(reuse).partition_report().peak_bytes
