"""Partitioning with a fake device: priority, declines, copies at boundaries, fallback policy,
IO binding on device, nested graphs, plugin discovery failures."""

from __future__ import annotations

import logging
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.errors import FallbackError, InvalidArgument
from turnout.sdk import plugins
from turnout.sdk.provider import ProviderFactory
from turnout.tools.testing import float_graph_model
from turnout_testbed.fake_device import FakeDeviceArray, FakeDeviceProviderFactory

FAKE = "FakeDeviceExecutionProvider"


@pytest.fixture
def fake() -> Iterator[FakeDeviceProviderFactory]:
    factory = FakeDeviceProviderFactory(ops=("Relu", "Add", "Mul"))
    turnout.register_provider(factory)
    from turnout.sdk import devices

    devices.clear_cache()
    yield factory
    plugins.registry.unregister(factory.name)
    devices.clear_cache()


def _alternating() -> onnx.ModelProto:
    """fake Relu -> cpu Neg -> fake Relu -> cpu Neg -> fake Add(t3, t0): crosses 4 times."""
    return float_graph_model(
        [
            helper.make_node("Relu", ["x0"], ["t0"], name="relu0"),
            helper.make_node("Neg", ["t0"], ["t1"], name="neg1"),
            helper.make_node("Relu", ["t1"], ["t2"], name="relu2"),
            helper.make_node("Neg", ["t2"], ["t3"], name="neg3"),
            helper.make_node("Add", ["t3", "t0"], ["y"], name="add4"),
        ],
        ["y"],
    )


def _expected(x: np.ndarray) -> np.ndarray:
    t0 = np.maximum(x, 0)
    return -np.maximum(-t0, 0) + t0


def test_copies_only_at_device_boundaries(fake: FakeDeviceProviderFactory) -> None:
    sess = turnout.InferenceSession(_alternating(), providers=[FAKE])
    x = np.array([-2, -1, 1, 2], np.float32)
    (y,) = sess.run(None, {"x0": x})
    np.testing.assert_allclose(y, _expected(x))
    report = sess.partition_report()
    placed = {a.node: a.provider for a in report.assignments}
    assert placed == {
        "relu0": FAKE,
        "neg1": "CPUExecutionProvider",
        "relu2": FAKE,
        "neg3": "CPUExecutionProvider",
        "add4": FAKE,
    }
    moves = sorted((c["value"], c["src"], c["dst"]) for c in report.copies)
    # x0 up; t0 down for neg1 (add4 reads t0 on the fake device: no copy); t1 up; t2 down;
    # t3 up; y down for the caller. One copy per value and device.
    assert moves == [
        ("t0", "fake:0", "cpu"),
        ("t1", "cpu", "fake:0"),
        ("t2", "fake:0", "cpu"),
        ("t3", "cpu", "fake:0"),
        ("x0", "cpu", "fake:0"),
        ("y", "fake:0", "cpu"),
    ]
    assert fake.calls == {"Relu": 2, "Add": 1}


def test_shared_value_is_copied_once(fake: FakeDeviceProviderFactory) -> None:
    model = float_graph_model(
        [
            helper.make_node("Neg", ["x0"], ["t"], name="neg"),
            helper.make_node("Relu", ["t"], ["a"], name="r1"),
            helper.make_node("Mul", ["t", "t"], ["b"], name="m"),
            helper.make_node("Add", ["a", "b"], ["y"], name="add"),
        ],
        ["y"],
    )
    sess = turnout.InferenceSession(model, providers=[FAKE])
    x = np.array([-2, -1, 1, 2], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x0": x})[0], np.maximum(-x, 0) + x * x)
    copies = sess.partition_report().copies
    t_copies = [c for c in copies if c["value"] == "t"]
    assert len(t_copies) == 1 and sorted(t_copies[0]["consumers"]) == ["m", "m", "r1"]


def test_no_copies_when_everything_is_on_one_device(fake: FakeDeviceProviderFactory) -> None:
    model = float_graph_model(
        [
            helper.make_node("Relu", ["x0"], ["t"], name="r"),
            helper.make_node("Add", ["t", "x0"], ["y"], name="a"),
        ],
        ["y"],
    )
    sess = turnout.InferenceSession(model, providers=[FAKE])
    sess.run(None, {"x0": np.ones(4, np.float32)})
    assert [(c["value"], c["dst"]) for c in sess.partition_report().copies] == [
        ("x0", "fake:0"),
        ("y", "cpu"),
    ]


def test_fallback_error_names_nodes_and_reasons(fake: FakeDeviceProviderFactory) -> None:
    so = turnout.SessionOptions()
    so.fallback = "error"
    with pytest.raises(FallbackError) as err:
        turnout.InferenceSession(_alternating(), so, providers=[FAKE])
    message = str(err.value)
    assert "2 node(s) would fall back to CPUExecutionProvider" in message
    for node in ("neg1", "neg3"):
        assert f"{node} (Neg): FakeDeviceExecutionProvider: no kernel for ai.onnx::Neg" in message


def test_fallback_config_entry_and_warn_logs_once(
    fake: FakeDeviceProviderFactory, caplog: pytest.LogCaptureFixture
) -> None:
    so = turnout.SessionOptions()
    so.add_session_config_entry("session.fallback", "error")
    with pytest.raises(FallbackError):
        turnout.InferenceSession(_alternating(), so, providers=[FAKE])
    with caplog.at_level(logging.WARNING, logger="turnout"):
        turnout.InferenceSession(_alternating(), providers=[FAKE])
    warnings = [r for r in caplog.records if "fell back" in r.getMessage()]
    assert len(warnings) == 1 and "2 node(s)" in warnings[0].getMessage()


def test_fallback_allow_is_silent(
    fake: FakeDeviceProviderFactory, caplog: pytest.LogCaptureFixture
) -> None:
    so = turnout.SessionOptions()
    so.fallback = "allow"
    with caplog.at_level(logging.WARNING, logger="turnout"):
        turnout.InferenceSession(_alternating(), so, providers=[FAKE])
    assert not [r for r in caplog.records if "fell back" in r.getMessage()]


def test_bad_fallback_value() -> None:
    with pytest.raises(InvalidArgument, match="allow"):
        turnout.SessionOptions().fallback = "sometimes"


def test_unknown_provider_warns_listing_installed_and_falls_back(
    fake: FakeDeviceProviderFactory,
) -> None:
    """As onnxruntime: a warning and the CPU provider; fallback policy "error" refuses."""
    with pytest.warns(UserWarning, match=r"NoSuchExecutionProvider.*installed:.*CPUExecut"):
        sess = turnout.InferenceSession(_alternating(), providers=["NoSuchExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    strict = turnout.SessionOptions()
    strict.fallback = "error"
    with pytest.raises(FallbackError, match=r"NoSuchExecutionProvider.*installed:"):
        turnout.InferenceSession(_alternating(), strict, providers=["NoSuchExecutionProvider"])


def test_unknown_provider_option_lists_valid_ones(fake: FakeDeviceProviderFactory) -> None:
    with pytest.raises(InvalidArgument, match=r"unknown provider option\(s\) colour; valid: note"):
        turnout.InferenceSession(_alternating(), providers=[(FAKE, {"colour": "red"})])


def test_alias_resolves(fake: FakeDeviceProviderFactory) -> None:
    sess = turnout.InferenceSession(_alternating(), providers=["fake"])
    assert sess.get_providers() == [FAKE, "CPUExecutionProvider"]


def test_io_binding_keeps_outputs_on_device(fake: FakeDeviceProviderFactory) -> None:
    model = float_graph_model([helper.make_node("Relu", ["x0"], ["y"], name="r")], ["y"])
    sess = turnout.InferenceSession(model, providers=[FAKE])
    x = np.array([-1, 2, -3, 4], np.float32)
    x_dev = turnout.OrtValue.ortvalue_from_numpy(x, "fake", 0)
    assert isinstance(x_dev._value, FakeDeviceArray) and x_dev.device_name() == "fake"
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x0", x_dev)
    binding.bind_output("y", "fake", 0)
    transfer = fake.last.data_transfer  # type: ignore[union-attr]
    ups, downs = transfer.to_device_count, transfer.to_host_count
    sess.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    assert out.device_name() == "fake" and isinstance(out._value, FakeDeviceArray)
    assert (transfer.to_device_count, transfer.to_host_count) == (ups, downs)  # no copies
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], np.maximum(x, 0))


def test_nested_graph_nodes_are_partitioned(fake: FakeDeviceProviderFactory) -> None:
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x0"], ["t"], name="inner_relu")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x0"], ["e"], name="inner_neg")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])],
    )
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if")],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x0", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = turnout.InferenceSession(model, providers=[FAKE])
    x = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(
        sess.run(None, {"c": np.array(True), "x0": x})[0], np.maximum(x, 0)
    )
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(False), "x0": x})[0], -x)
    subs = sess.partition_report().subgraphs
    placed = {a.node: a.provider for rep in subs.values() for a in rep.assignments}
    assert placed == {"inner_relu": FAKE, "inner_neg": "CPUExecutionProvider"}


def test_report_formats(fake: FakeDeviceProviderFactory) -> None:
    sess = turnout.InferenceSession(_alternating(), providers=[FAKE])
    report = sess.partition_report()
    data = report.to_dict()
    assert data["counts"] == {FAKE: 3, "CPUExecutionProvider": 2}
    dot = report.to_dot(sess._engine.graph)
    assert dot.startswith('digraph "g"') and '"relu0" -> "neg1" [style=dashed, label=copy]' in dot
    page = report.to_html()
    assert page.startswith("<!doctype html>") and "neg1" in page and "http" not in page
    assert "copy each run t0: fake:0 -> cpu (for neg1)" in report.to_text()


def test_initializer_uploads_are_counted_apart_from_copies(
    fake: FakeDeviceProviderFactory,
) -> None:
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [w],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    report = turnout.InferenceSession(model, providers=[FAKE]).partition_report()
    kinds = {(c["value"], c["dst"]): c["once"] for c in report.copies}
    assert kinds == {("w", "fake:0"): True, ("x", "fake:0"): False, ("y", "cpu"): False}
    assert "upload once w: cpu -> fake:0 (for add)" in report.to_text()


# -- discovery ------------------------------------------------------------------------------


class _EntryPoint:
    def __init__(self, name: str, load: Any) -> None:
        self.name = name
        self._load = load

    def load(self) -> Any:
        return self._load()


def _good_plugin() -> types.ModuleType:
    mod = types.ModuleType("good_plugin")

    class GoodFactory(ProviderFactory):
        name = "GoodExecutionProvider"

        def _create(self, options: dict[str, Any]) -> Any:
            raise AssertionError("not created in this test")

    @turnout.hookimpl
    def turnout_providers() -> list[ProviderFactory]:
        return [GoodFactory()]

    mod.turnout_providers = turnout_providers  # type: ignore[attr-defined]
    return mod


def _broken_plugin() -> Any:
    raise ImportError("libaccel.so: cannot open shared object file")


def test_plugin_that_fails_to_import_is_reported_and_others_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    eps = [_EntryPoint("broken", _broken_plugin), _EntryPoint("good", _good_plugin)]
    monkeypatch.setattr(plugins, "entry_points", lambda group: eps)
    reg = plugins.ProviderRegistry()
    names = [f.name for f in reg.all()]
    assert names == ["CPUExecutionProvider", "GoodExecutionProvider"]
    assert [(b.name, b.error) for b in reg.broken] == [
        ("broken", "ImportError: libaccel.so: cannot open shared object file")
    ]


def test_disable_plugins_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    eps = [_EntryPoint("broken", _broken_plugin), _EntryPoint("good", _good_plugin)]
    monkeypatch.setattr(plugins, "entry_points", lambda group: eps)
    monkeypatch.setenv("TURNOUT_DISABLE_PLUGINS", "broken, good")
    reg = plugins.ProviderRegistry()
    assert [f.name for f in reg.all()] == ["CPUExecutionProvider"] and reg.broken == []


def test_probe_failure_is_a_reason_not_a_crash() -> None:
    class Flaky(ProviderFactory):
        name = "FlakyExecutionProvider"

        def _probe(self) -> Any:
            raise OSError("driver version 470 is older than the required 525")

        def _create(self, options: dict[str, Any]) -> Any:
            raise AssertionError("never created: its probe fails")

    availability = Flaky().probe()
    assert not availability.ok
    assert (
        availability.reason
        == "probe failed: OSError: driver version 470 is older than the required 525"
    )


def test_run_with_ort_values_accepts_device_inputs(fake: FakeDeviceProviderFactory) -> None:
    model = float_graph_model([helper.make_node("Relu", ["x0"], ["y"], name="r")], ["y"])
    sess = turnout.InferenceSession(model, providers=[FAKE])
    x = np.array([-1, 2, -3, 4], np.float32)
    x_dev = turnout.OrtValue.ortvalue_from_numpy(x, "fake", 0)
    transfer = fake.last.data_transfer  # type: ignore[union-attr]
    ups = transfer.to_device_count
    (y,) = sess.run_with_ort_values(["y"], {"x0": x_dev})
    assert transfer.to_device_count == ups  # the device input was used in place
    np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
