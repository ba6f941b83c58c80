"""Measured placement (issue 33): nodes go where the measured plan is fastest, copies counted.

The provider here is this test's own: a "lab" device whose buffers are a distinct type (so a
missing copy fails), whose kernels sleep for a set time per op (so which one is faster does
not depend on the machine), and whose transfer sleeps per copy.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import turnout
from turnout.engine.placement import BUDGET_KEY, PLACEMENT_KEY
from turnout.graph.errors import InvalidArgument
from turnout.sdk import plugins
from turnout.sdk.provider import (
    CONTRACT_VERSION,
    Allocator,
    Availability,
    DataTransfer,
    DeviceEntry,
    ExecutionProvider,
    KernelNode,
    ProviderFactory,
)
from turnout.tools.testing import float_graph_model

LAB = "LabExecutionProvider"
CPU = "CPUExecutionProvider"


class LabArray:
    """A buffer on the lab device: wraps a host array, is not one. The lab computes lazily
    (its kernels return at once; the work happens when the value is read back), which makes
    its kernels fast on any machine."""

    def __init__(self, data: np.ndarray | None = None, thunk: Any = None) -> None:
        self._data = data
        self._thunk = thunk

    @property
    def data(self) -> np.ndarray:
        if self._data is None:
            self._data, self._thunk = self._thunk(), None
        return self._data

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)


class LabTransfer(DataTransfer):
    """Zero-copy, plus `copy_s` seconds per copy."""

    def __init__(self, device: Any, copy_s: float) -> None:
        super().__init__(device)
        self.copy_s = copy_s

    def is_device_value(self, value: Any) -> bool:
        return isinstance(value, LabArray)

    def _to_device(self, value: Any, device: Any) -> Any:
        if self.copy_s:  # sleep(0) yields the processor: on a busy machine, for milliseconds
            time.sleep(self.copy_s)
        return LabArray(np.asarray(value))

    def _to_host(self, value: Any) -> np.ndarray:
        if self.copy_s:
            time.sleep(self.copy_s)
        return value.data


_OPS = {
    "Relu": lambda x: np.maximum(x, np.float32(0)),
    "Neg": lambda x: -x,
    "Add": lambda a, b: a + b,
}


class LabProvider(ExecutionProvider):
    def __init__(self, options: dict[str, Any], factory: LabFactory) -> None:
        super().__init__(options, factory)
        self.data_transfer = LabTransfer(self.device, factory.copy_s)
        for op, seconds in factory.kernel_s.items():
            self._register(op, seconds, factory.runs)

    def _register(self, op: str, seconds: float, runs: Counter[str]) -> None:
        impl = _OPS[op]

        def build(node: KernelNode) -> Any:
            def run(*xs: Any) -> tuple[Any, ...]:
                runs[op] += 1
                assert all(isinstance(x, LabArray) for x in xs), f"{op} got a host value"
                if seconds:
                    time.sleep(seconds)
                return (LabArray(thunk=lambda: impl(*[x.data for x in xs])),)

            return run

        self.kernels.register(op, since=1)(build)


class LabFactory(ProviderFactory):
    """Claims the ops of `kernel_s` (op -> seconds per call); each copy takes `copy_s`."""

    name = LAB
    aliases = ("lab",)
    device_type = "lab"
    version = "1"
    contract_version = CONTRACT_VERSION

    def __init__(self, kernel_s: dict[str, float], copy_s: float = 0.0) -> None:
        self.kernel_s = kernel_s
        self.copy_s = copy_s
        self.runs: Counter[str] = Counter()

    def _probe(self) -> Availability:
        return Availability(True, (DeviceEntry(self.device()),), version="1")

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return LabProvider(options, self)

    def create_allocator(self, device: Any) -> Allocator:
        return Allocator(device)

    def create_data_transfer(self, device: Any) -> DataTransfer:
        return LabTransfer(device, self.copy_s)


@pytest.fixture
def cache_dir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TURNOUT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TURNOUT_CPU_NUMPY_ONLY", "1")  # the host is numpy alone: no numba here
    return tmp_path / "cache"


def _lab(kernel_s: dict[str, float], copy_s: float = 0.0) -> Iterator[LabFactory]:
    factory = LabFactory(kernel_s, copy_s)
    turnout.register_provider(factory)
    try:
        yield factory
    finally:
        plugins.registry.unregister(factory.name)


SIZE = 1 << 20  # 4 MiB of float32: the host's numpy Add takes a measurable time


def _chain() -> onnx.ModelProto:
    """relu -> add(relu, relu) -> neg: the lab claims Relu and Add, the host all three."""
    return float_graph_model(
        [
            helper.make_node("Relu", ["x0"], ["r"], name="relu"),
            helper.make_node("Add", ["r", "r"], ["a"], name="add"),
            helper.make_node("Neg", ["a"], ["y"], name="neg"),
        ],
        ["y"],
        size=SIZE,
    )


def _check_runs(sess: Any) -> None:
    x = np.random.default_rng(0).standard_normal(SIZE).astype(np.float32)
    (y,) = sess.run(None, {"x0": x})
    np.testing.assert_allclose(y, -2 * np.maximum(x, 0))


def _session(model: onnx.ModelProto, placement: str, budget: str = "20") -> Any:
    so = turnout.SessionOptions()
    so.placement = placement
    so.add_session_config_entry(BUDGET_KEY, budget)
    so.fallback = "allow"
    return turnout.InferenceSession(model.SerializeToString(), so, providers=[LAB, CPU])


def _placed(sess: Any) -> dict[str, str]:
    return {a.node: a.provider for a in sess.partition_report().assignments}


@pytest.fixture
def slow_relu_fast_add(cache_dir: Any) -> Iterator[LabFactory]:
    # the lab's Relu takes 20 ms (numpy's: about a millisecond); its Add returns at once;
    # its copies are zero-copy (microseconds)
    yield from _lab({"Relu": 0.02, "Add": 0.0})


def test_measured_places_each_op_where_it_wins_and_counts_copies(
    slow_relu_fast_add: LabFactory,
) -> None:
    model = _chain()
    assert _placed(_session(model, "priority")) == {"relu": LAB, "add": LAB, "neg": CPU}
    sess = _session(model, "measured")
    assert _placed(sess) == {"relu": CPU, "add": LAB, "neg": CPU}
    report = sess.partition_report()
    nodes = report.placement["nodes"]
    relu = {r["provider"]: r for r in nodes["relu"]["candidates"]}
    assert relu[LAB]["kernel_s"] >= 0.02 > relu[CPU]["kernel_s"]
    assert "fastest kernel" in nodes["relu"]["reason"]
    add = {r["provider"]: r for r in nodes["add"]["candidates"]}
    assert add[LAB]["kernel_s"] < add[CPU]["kernel_s"]
    # on the lab, Add reads r uploaded and Neg reads its sum downloaded: both copies count
    assert add[LAB]["copy_s"] > 0.0 == add[CPU]["copy_s"]
    assert {(c["value"], c["src"], c["dst"]) for c in report.copies} == {
        ("r", "cpu", "lab:0"),
        ("a", "lab:0", "cpu"),
    }
    assert report.placement["copy_s"] > 0.0
    _check_runs(sess)


@pytest.fixture
def costly_copies(cache_dir: Any) -> Iterator[LabFactory]:
    # the same kernels, but each copy takes 50 ms
    yield from _lab({"Relu": 0.02, "Add": 0.0}, copy_s=0.05)


def test_copies_can_keep_a_faster_kernel_off_its_device(costly_copies: LabFactory) -> None:
    sess = _session(_chain(), "measured")
    assert _placed(sess) == {"relu": CPU, "add": CPU, "neg": CPU}
    nodes = sess.partition_report().placement["nodes"]
    add = {r["provider"]: r for r in nodes["add"]["candidates"]}
    assert add[LAB]["kernel_s"] < add[CPU]["kernel_s"]  # faster, but
    assert add[LAB]["copy_s"] >= 0.09  # two copies of 50 ms
    assert "copies" in nodes["add"]["reason"]
    assert sess.partition_report().copies == []
    # the lab got no node: its run hooks are not called
    assert [p.name for p in sess._engine.run_providers] == [CPU]
    _check_runs(sess)


class _InterruptedTransfer(LabTransfer):
    """Zero-copy, but its first `slow` copies each way stall for 50 ms, as a copy preempted on
    a busy machine does."""

    def __init__(self, device: Any, slow: int) -> None:
        super().__init__(device, 0.0)
        self.left = {"up": slow, "down": slow}

    def _stall(self, way: str) -> None:
        if self.left[way]:
            self.left[way] -= 1
            time.sleep(0.05)

    def _to_device(self, value: Any, device: Any) -> Any:
        self._stall("up")
        return super()._to_device(value, device)

    def _to_host(self, value: Any) -> np.ndarray:
        self._stall("down")
        return super()._to_host(value)


def test_a_copy_counts_at_its_uninterrupted_speed(slow_relu_fast_add: LabFactory) -> None:
    """Two of the three timed copies each way stall: the copy still counts as zero-copy."""
    from turnout.engine.placement.timing import Clock, CopyTimes, time_copies

    provider = LabProvider({}, slow_relu_fast_add)
    provider.data_transfer = _InterruptedTransfer(provider.device, slow=2)
    times = time_copies([provider], [4096], Clock(20.0))
    device = str(provider.device)
    for way in ("up", "down"):
        assert times.seconds[CopyTimes.key(device, way, 4096)] < 0.01


def test_second_session_places_from_the_cache_without_timing(
    slow_relu_fast_add: LabFactory, cache_dir: Any
) -> None:
    model = _chain()
    first_sess = _session(model, "measured")
    first = first_sess.partition_report().placement
    placed_first = _placed(first_sess)
    assert not first["from_cache"] and first["timed"] > 0 and first["cache_written"]
    runs = sum(slow_relu_fast_add.runs.values())
    assert runs > 0  # the timing pass ran the lab's kernels
    second_sess = _session(model, "measured")
    second = second_sess.partition_report().placement
    assert second["from_cache"] and second["timed"] == 0
    assert sum(slow_relu_fast_add.runs.values()) == runs  # no lab kernel ran again
    assert _placed(second_sess) == placed_first

    assert second["nodes"] == first["nodes"]
    with open(first["cache_file"]) as f:
        stored = json.load(f)
    assert stored["kernels"] and stored["copies"]


def test_priority_is_the_default_and_bad_values_are_refused(cache_dir: Any) -> None:
    so = turnout.SessionOptions()
    assert so.placement == "priority"
    with pytest.raises(InvalidArgument, match="placement"):
        so.placement = "fastest"
    with pytest.raises(InvalidArgument, match="budget"):
        so.add_session_config_entry(BUDGET_KEY, "0")
    so.add_session_config_entry(PLACEMENT_KEY, "measured")
    assert so.placement == "measured"
    sess = turnout.InferenceSession(_chain().SerializeToString(), providers=[CPU])
    assert sess.partition_report().placement is None
    _check_runs(sess)


def test_reports_say_why(slow_relu_fast_add: LabFactory) -> None:
    report = _session(_chain(), "measured").partition_report()
    text = report.to_text()
    assert "measured: LabExecutionProvider" in text and "placement: measured" in text
    assert "Measured placement" in report.to_html()
    data = json.loads(report.to_json())
    assert data["placement"]["nodes"]["relu"]["winner"] == CPU
    _check_runs(_session(_chain(), "measured"))


def test_profile_names_the_candidates(slow_relu_fast_add: LabFactory, tmp_path: Any) -> None:
    so = turnout.SessionOptions()
    so.placement = "measured"
    so.fallback = "allow"
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = turnout.InferenceSession(_chain().SerializeToString(), so, providers=[LAB, CPU])
    _check_runs(sess)
    with open(sess.end_profiling()) as f:
        events = json.load(f)["traceEvents"]
    relu = next(e for e in events if e["name"] == "relu_kernel_time")
    assert relu["args"]["placement"]["winner"] == CPU
    providers = {r["provider"] for r in relu["args"]["placement"]["candidates"]}
    assert providers == {LAB, CPU}


def test_explain_cli_shows_the_measured_choice(
    slow_relu_fast_add: LabFactory, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from turnout.tools.cli import main

    path = tmp_path / "chain.onnx"
    onnx.save(_chain(), path)
    argv = [
        "explain",
        str(path),
        "--providers",
        f"{LAB},{CPU}",
        "--placement",
        "measured",
        "--budget",
        "20",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "measured: LabExecutionProvider" in text and "-> CPUExecutionProvider" in text
    assert main([*argv, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["placement"]["from_cache"]  # the first explain filled the cache
    assert data["placement"]["nodes"]["add"]["winner"] == LAB, data["placement"]["nodes"]["add"]


def test_conformance_reports_wins_and_losses_per_op(slow_relu_fast_add: LabFactory) -> None:
    cases_mod = pytest.importorskip("turnout_conformance.cases")
    from turnout_conformance.placement import placement_times, to_text

    cases = cases_mod.collect_cases(cases_mod.parse_kinds("node"), "^test_(relu|add)$")
    table = placement_times(cases, [LAB], budget_s=10)
    ops = table[LAB]
    assert ops["Relu"].losses == 1 and ops["Relu"].wins == 0  # 20 ms against numpy's µs
    assert len(ops["Add"].ratios) == 1  # timed (microseconds both: either may win)
    text = to_text(table)
    assert "LabExecutionProvider against the CPU host path" in text and "Relu" in text


def test_dynamic_shapes_are_placed_at_the_first_run(slow_relu_fast_add: LabFactory) -> None:
    model = _chain()
    for vi in (*model.graph.input, *model.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_param = "n"
    sess = _session(model, "measured")
    before = sess.partition_report().placement
    assert before["timed"] == 0  # nothing has a shape yet: each node follows its input
    assert "shape unknown" in before["nodes"]["relu"]["reason"]
    assert "its inputs' device" in before["nodes"]["relu"]["reason"]
    assert _placed(sess) == {"relu": CPU, "add": CPU, "neg": CPU}
    _check_runs(sess)  # the first run places again, at its shapes, before it starts
    after = sess.partition_report().placement
    assert after["shapes"] == {"x0": [SIZE]} and after["timed"] > 0
    assert _placed(sess) == {"relu": CPU, "add": LAB, "neg": CPU}
    runs = sum(slow_relu_fast_add.runs.values())
    _check_runs(sess)  # same shapes: no new placement, no timing
    assert sum(slow_relu_fast_add.runs.values()) == runs + 1  # the run's own Add
    small = np.ones(8, np.float32)
    np.testing.assert_allclose(sess.run(None, {"x0": small})[0], -2 * small)
    assert sess.partition_report().placement["shapes"] == {"x0": [8]}


def test_nested_graphs_are_placed_by_the_policy_too(slow_relu_fast_add: LabFactory) -> None:
    vec = [SIZE]
    out = helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, vec)

    def branch(op: str, name: str) -> onnx.GraphProto:
        node = helper.make_node(op, ["x0"], ["b"], name=op.lower())
        return helper.make_graph([node], name, [], [out])

    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x0"], ["s"], name="sum", keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
            helper.make_node(
                "If", ["c"], ["y"], name="if", then_branch=branch("Relu", "then"),
                else_branch=branch("Neg", "else"),
            ),
        ],
        "g",
        [helper.make_tensor_value_info("x0", onnx.TensorProto.FLOAT, vec)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, vec)],
        [onnx.numpy_helper.from_array(np.array(-1e9, np.float32), "zero")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def body(sess: Any) -> dict[str, str]:
        x = np.ones(SIZE, np.float32)
        np.testing.assert_allclose(sess.run(None, {"x0": x})[0], x)  # built at the first run
        sub = sess.partition_report().subgraphs
        return {a.node: a.provider for key, r in sub.items() for a in r.assignments}

    assert body(_session(model, "priority"))["relu"] == LAB
    sess = _session(model, "measured")
    assert body(sess)["relu"] == CPU  # the lab's Relu is 20 ms
    then = next(r for k, r in sess.partition_report().subgraphs.items() if "then" in k)
    assert then.placement is not None and then.placement["nodes"]["relu"]["winner"] == CPU
