"""onnxruntime's device-centred provider API: `get_ep_devices()`, `add_provider_for_devices`,
selection policies and delegates, `register_execution_provider_library`, and the partition in
onnxruntime's form (`get_provider_graph_assignment_info`, `get_input_epdevices`)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.errors import Fail, InvalidArgument
from turnout_testbed.fake_device import FakeDeviceProviderFactory

Policy = turnout.OrtExecutionProviderDevicePolicy
CPU = "CPUExecutionProvider"
FAKE = "FakeDeviceExecutionProvider"
RECORD = "session.record_ep_graph_assignment_info"


def _model() -> onnx.ModelProto:
    """x -> Relu -> Neg -> Relu -> y: the fake device claims Relu only."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu1"),
        helper.make_node("Neg", ["a"], ["b"], name="neg"),
        helper.make_node("Relu", ["b"], ["y"], name="relu2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def fake_gpu() -> Iterator[FakeDeviceProviderFactory]:
    factory = FakeDeviceProviderFactory(ops={"Relu"}, hardware_type="gpu")
    turnout.register_provider(factory)
    yield factory
    turnout.sdk.plugins.registry.unregister(factory.name)


def _session(opts: turnout.SessionOptions) -> turnout.InferenceSession:
    return turnout.InferenceSession(_model().SerializeToString(), opts)


def _policy(policy: Policy) -> turnout.SessionOptions:
    opts = turnout.SessionOptions()
    opts.set_provider_selection_policy(policy)
    return opts


def test_ep_devices_list_every_available_provider_cpu_last() -> None:
    devices = turnout.get_ep_devices()
    names = [d.ep_name for d in devices]
    assert names[-1] == CPU
    assert set(names) == {f.name for f in turnout.sdk.plugins.registry.available()}
    cpu = devices[-1]
    assert cpu.device.type == turnout.OrtHardwareDeviceType.CPU
    assert cpu.memory_info.name == "Cpu"


def test_a_device_provider_reports_its_hardware_type(fake_gpu: FakeDeviceProviderFactory) -> None:
    (fake,) = [d for d in turnout.get_ep_devices() if d.ep_name == FAKE]
    assert fake.device.type == turnout.OrtHardwareDeviceType.GPU
    assert fake.device.metadata == {"kind": "test double"}


@pytest.mark.parametrize("policy", [Policy.PREFER_GPU, Policy.MAX_PERFORMANCE])
def test_gpu_policies_choose_the_gpu_device(
    fake_gpu: FakeDeviceProviderFactory, policy: Policy
) -> None:
    sess = _session(_policy(policy))
    assert sess.get_providers() == [FAKE, CPU]
    placed = {a.node: a.provider for a in sess.partition_report().assignments}
    assert placed["relu1"] == FAKE
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(-np.maximum(x, 0), 0))


@pytest.mark.parametrize(
    "policy",
    [Policy.DEFAULT, Policy.PREFER_CPU, Policy.PREFER_NPU, Policy.MIN_OVERALL_POWER],
)
def test_other_policies_keep_the_cpu_request(
    fake_gpu: FakeDeviceProviderFactory, policy: Policy
) -> None:
    # no NPU here: the NPU policies fall back to the CPU request, as onnxruntime's do
    assert _session(_policy(policy)).get_providers() == [CPU]


def test_an_npu_policy_chooses_an_npu() -> None:
    npu = FakeDeviceProviderFactory(ops={"Relu"}, hardware_type="npu")
    turnout.register_provider(npu)
    try:
        assert _session(_policy(Policy.MAX_EFFICIENCY)).get_providers() == [FAKE, CPU]
        assert _session(_policy(Policy.PREFER_GPU)).get_providers() == [CPU]
    finally:
        turnout.sdk.plugins.registry.unregister(npu.name)


def test_explicit_providers_win_over_the_policy(fake_gpu: FakeDeviceProviderFactory) -> None:
    sess = turnout.InferenceSession(
        _model().SerializeToString(), _policy(Policy.PREFER_GPU), providers=[CPU]
    )
    assert sess.get_providers() == [CPU]


def test_unknown_policy_is_a_clear_error() -> None:
    with pytest.raises(InvalidArgument, match="unknown provider selection policy 42"):
        turnout.SessionOptions().set_provider_selection_policy(42)


def test_delegate_gets_onnxruntime_arguments_and_chooses_by_device_type(
    fake_gpu: FakeDeviceProviderFactory,
) -> None:
    seen: dict[str, Any] = {}

    def choose_gpu(
        devices: Sequence[turnout.OrtEpDevice],
        model_metadata: Mapping[str, str],
        runtime_metadata: Mapping[str, str],
        max_selections: int,
    ) -> list[turnout.OrtEpDevice]:
        seen.update(metadata=model_metadata, max=max_selections, n=len(devices))
        return [d for d in devices if d.device.type == turnout.OrtHardwareDeviceType.GPU]

    opts = turnout.SessionOptions()
    opts.set_provider_selection_policy_delegate(choose_gpu)
    assert _session(opts).get_providers() == [FAKE, CPU]
    assert seen["metadata"]["graph_name"] == "g"
    assert seen["max"] == seen["n"] >= 2


def test_delegate_chooses_opencl_or_numba_by_device() -> None:
    """The must-show of the provider-SDK issue: one delegate, choosing by device type and
    provider; OpenCL (on PoCL, a CPU device) or the host's numba."""
    names = {d.ep_name for d in turnout.get_ep_devices()}
    missing = {"OpenCLExecutionProvider", "NumbaExecutionProvider"} - names
    if missing:
        pytest.skip(f"needs both providers available; missing here: {sorted(missing)}")

    def prefer(name: str) -> Any:
        def delegate(devices: Sequence[turnout.OrtEpDevice], *_: Any) -> list[Any]:
            return [
                d
                for d in devices
                if d.ep_name == name and d.device.type == turnout.OrtHardwareDeviceType.CPU
            ]

        return delegate

    for name in ("OpenCLExecutionProvider", "NumbaExecutionProvider"):
        opts = turnout.SessionOptions()
        opts.set_provider_selection_policy_delegate(prefer(name))
        sess = _session(opts)
        assert sess.get_providers() == [name, CPU]
        assert name in sess.partition_report().counts()


@pytest.mark.parametrize(
    ("delegate", "message"),
    [
        (lambda *a: [], "did not select anything"),
        (lambda *a: ["CPU"], "not one of the OrtEpDevice entries"),
        (lambda *a: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_a_bad_delegate_answer_is_a_clear_error(delegate: Any, message: str) -> None:
    opts = turnout.SessionOptions()
    opts.set_provider_selection_policy_delegate(delegate)
    with pytest.raises(Fail, match=message):
        _session(opts)


def test_delegate_must_be_callable() -> None:
    with pytest.raises(InvalidArgument, match="must be callable"):
        turnout.SessionOptions().set_provider_selection_policy_delegate("PREFER_GPU")


def test_add_provider_for_devices_uses_the_device_options(
    fake_gpu: FakeDeviceProviderFactory,
) -> None:
    (fake,) = [d for d in turnout.get_ep_devices() if d.ep_name == FAKE]
    opts = turnout.SessionOptions()
    opts.add_provider_for_devices([fake], {"note": "hello"})
    sess = _session(opts)
    assert sess.get_providers() == [FAKE, CPU]
    assert sess.get_provider_options()[FAKE] == {"note": "hello"}


def test_add_provider_for_devices_refuses_mixed_providers(
    fake_gpu: FakeDeviceProviderFactory,
) -> None:
    devices = turnout.get_ep_devices()
    with pytest.raises(InvalidArgument, match="one execution provider"):
        turnout.SessionOptions().add_provider_for_devices(devices, {})
    with pytest.raises(InvalidArgument, match="expected OrtEpDevice"):
        turnout.SessionOptions().add_provider_for_devices(["cpu"], {})
    with pytest.raises(InvalidArgument, match="no EP devices"):
        turnout.SessionOptions().add_provider_for_devices([], {})


def test_assignment_info_needs_the_config_entry() -> None:
    sess = _session(turnout.SessionOptions())
    with pytest.raises(Fail, match=RECORD):
        sess.get_provider_graph_assignment_info()


def test_assignment_info_covers_every_node(fake_gpu: FakeDeviceProviderFactory) -> None:
    opts = turnout.SessionOptions()
    opts.add_session_config_entry(RECORD, "1")
    sess = turnout.InferenceSession(_model().SerializeToString(), opts, providers=[FAKE, CPU])
    info = sess.get_provider_graph_assignment_info()
    placed = {n.name: (s.ep_name, n.op_type, n.domain) for s in info for n in s.get_nodes()}
    assert placed == {
        "relu1": (FAKE, "Relu", ""),
        "neg": (CPU, "Neg", ""),
        "relu2": (FAKE, "Relu", ""),
    }


def test_input_ep_devices_name_the_first_reader(fake_gpu: FakeDeviceProviderFactory) -> None:
    on_fake = turnout.InferenceSession(_model().SerializeToString(), providers=[FAKE, CPU])
    (device,) = on_fake.get_input_epdevices()
    assert device is not None and device.ep_name == FAKE
    (device,) = _session(turnout.SessionOptions()).get_input_epdevices()
    assert device is not None and device.ep_name == CPU


_LIBRARY = '''
"""A provider brought by path: the fake device under another name."""
from turnout_testbed.fake_device import FakeDeviceProviderFactory


class LibraryFactory(FakeDeviceProviderFactory):
    name = "LibraryExecutionProvider"
    aliases = ("library",)

    def _create(self, options):
        provider = super()._create(options)
        provider.name = self.name
        return provider


def turnout_providers():
    return [LibraryFactory(ops={"Relu"})]
'''


def test_register_execution_provider_library_from_a_module(tmp_path: Path) -> None:
    path = tmp_path / "library_ep.py"
    path.write_text(textwrap.dedent(_LIBRARY))
    turnout.register_execution_provider_library("lib", str(path))
    try:
        assert "LibraryExecutionProvider" in turnout.get_available_providers()
        with pytest.raises(Fail, match="already registered"):
            turnout.register_execution_provider_library("lib", str(path))
        sess = turnout.InferenceSession(
            _model().SerializeToString(), providers=["LibraryExecutionProvider"]
        )
        assert sess.partition_report().counts()["LibraryExecutionProvider"] == 2
    finally:
        turnout.unregister_execution_provider_library("lib")
    assert "LibraryExecutionProvider" not in turnout.get_available_providers()
    with pytest.raises(Fail, match="was not registered"):
        turnout.unregister_execution_provider_library("lib")


def test_register_execution_provider_library_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(Fail, match=r"Failed to load library .*missing\.py"):
        turnout.register_execution_provider_library("x", str(tmp_path / "missing.py"))
    no_hook = tmp_path / "no_hook.py"
    no_hook.write_text("VALUE = 1\n")
    with pytest.raises(Fail, match="defines no turnout_providers"):
        turnout.register_execution_provider_library("x", str(no_hook))
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(Fail, match="RuntimeError: boom"):
        turnout.register_execution_provider_library("x", str(broken))
    shared = tmp_path / "ep.so"
    shared.write_bytes(b"\x7fELF")
    with pytest.raises(Fail, match="turnout providers are Python"):
        turnout.register_execution_provider_library("x", str(shared))


class _MissingDriverFactory(FakeDeviceProviderFactory):
    """A provider whose probe finds no driver: it lists no devices, only a reason."""

    name = "MissingDriverExecutionProvider"
    aliases = ()

    def _probe(self) -> turnout.sdk.provider.Availability:
        return turnout.sdk.provider.Availability(False, reason="no driver: libfake.so not found")


@pytest.fixture
def missing_driver() -> Iterator[_MissingDriverFactory]:
    factory = _MissingDriverFactory()
    turnout.register_provider(factory)
    yield factory
    turnout.sdk.plugins.registry.unregister(factory.name)


def test_unavailable_provider_lists_no_device_unless_asked_then_says_why(
    missing_driver: _MissingDriverFactory,
) -> None:
    assert missing_driver.name not in {d.ep_name for d in turnout.get_ep_devices()}
    listed = turnout.get_ep_devices(include_unavailable=True)
    (entry,) = [d for d in listed if d.ep_name == missing_driver.name]
    assert not entry.available
    assert entry.unavailable_reason == "no driver: libfake.so not found"
    assert entry.device.type == turnout.OrtHardwareDeviceType.GPU
    flags = [d.available for d in listed]
    assert flags == sorted(flags, reverse=True)  # every device that can run comes first


def test_add_provider_for_an_unavailable_device_fails_with_the_reason(
    missing_driver: _MissingDriverFactory,
) -> None:
    (entry,) = [
        d
        for d in turnout.get_ep_devices(include_unavailable=True)
        if d.ep_name == missing_driver.name
    ]
    opts = turnout.SessionOptions()
    with pytest.raises(InvalidArgument, match=r"libfake\.so not found"):
        opts.add_provider_for_devices([entry], {})
