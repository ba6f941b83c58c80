"""Contract v2 memory, streams and the one device declaration, on the fake device: the plan
frees dead values through a pooling allocator, kernels allocate through their context, copies
are batched, copies to the host wait on an event before the host reads them, and a provider
whose device disagrees with its factory is refused."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.engine.provider_creation import create_provider
from turnout.graph.errors import EPFail, NotImplemented
from turnout.sdk import devices, plugins
from turnout.sdk.provider import (
    CONTRACT_VERSION,
    Allocator,
    DataTransfer,
    Device,
    ExecutionProvider,
    KernelNode,
    ProviderFactory,
)
from turnout.tools.testing import float_graph_model
from turnout_testbed.fake_device import (
    SENTINEL,
    FakeAllocator,
    FakeDataTransfer,
    FakeDeviceArray,
    FakeDeviceProviderFactory,
    FakeStream,
)


@contextlib.contextmanager
def _registered(*factories: ProviderFactory) -> Iterator[None]:
    for factory in factories:
        turnout.register_provider(factory)
    devices.clear_cache()
    try:
        yield
    finally:
        for factory in factories:
            plugins.registry.unregister(factory.name)
        devices.clear_cache()


@pytest.fixture
def fake() -> Iterator[FakeDeviceProviderFactory]:
    factory = FakeDeviceProviderFactory(ops=("Relu", "Add", "Mul"))
    with _registered(factory):
        yield factory


@pytest.fixture
def fake_streams() -> Iterator[FakeDeviceProviderFactory]:
    factory = FakeDeviceProviderFactory(ops=("Relu", "Add", "Mul"), streams=True)
    with _registered(factory):
        yield factory


def _chain() -> onnx.ModelProto:
    """x0 -> Relu -> a; Add(a, a) -> b; Mul(b, b) -> y: all on the fake device."""
    return float_graph_model(
        [
            helper.make_node("Relu", ["x0"], ["a"], name="relu"),
            helper.make_node("Add", ["a", "a"], ["b"], name="add"),
            helper.make_node("Mul", ["b", "b"], ["y"], name="mul"),
        ],
        ["y"],
    )


X = np.array([-1, 2, -3, 4], np.float32)


def test_the_plan_frees_dead_device_values_through_the_allocator(
    fake: FakeDeviceProviderFactory,
) -> None:
    sess = turnout.InferenceSession(_chain(), providers=[fake.name])
    allocator = fake.last.allocator  # type: ignore[union-attr]
    (y,) = sess.run(None, {"x0": X})
    np.testing.assert_array_equal(y, (2 * np.maximum(X, 0)) ** 2)
    # x0's upload, a, b and y on the device are dead after their last reader; the host copy
    # of y is the graph output and is not the device's to free
    assert allocator.frees == 4
    assert allocator.empties == 1  # the upload's destination came from the allocator


def test_without_memory_reuse_nothing_is_freed(fake: FakeDeviceProviderFactory) -> None:
    opts = turnout.SessionOptions()
    opts.enable_mem_reuse = False
    sess = turnout.InferenceSession(_chain(), opts, providers=[fake.name])
    sess.run(None, {"x0": X})
    assert fake.last.allocator.frees == 0  # type: ignore[union-attr]


def test_inputs_a_step_needs_from_the_host_travel_in_one_batch(
    fake: FakeDeviceProviderFactory,
) -> None:
    model = float_graph_model([helper.make_node("Add", ["x0", "x1"], ["y"], name="add")], ["y"], 2)
    sess = turnout.InferenceSession(model, providers=[fake.name])
    transfer = fake.last.data_transfer  # type: ignore[union-attr]
    (y,) = sess.run(None, {"x0": X, "x1": 2 * X})
    np.testing.assert_array_equal(y, 3 * X)
    assert transfer.batches == [2, 1]  # both inputs in one call, then the output back
    copies = [st for st in sess._engine.plan.steps if st.op_type.startswith("Memcpy")]
    assert [st.inputs for st in copies] == [("x0", "x1"), ("y",)]


def _crossing() -> onnx.ModelProto:
    """fake Relu(x0) -> a; a host Neg(x1) in between; host Sub(a, c) reads a on the host."""
    return float_graph_model(
        [
            helper.make_node("Relu", ["x0"], ["a"], name="relu"),
            helper.make_node("Neg", ["x1"], ["c"], name="neg"),
            helper.make_node("Sub", ["a", "c"], ["y"], name="sub"),
        ],
        ["y"],
        2,
    )


def test_a_copy_to_the_host_starts_after_its_producer_and_is_waited_for_by_its_reader(
    fake_streams: FakeDeviceProviderFactory,
) -> None:
    sess = turnout.InferenceSession(_crossing(), providers=[fake_streams.name])
    order = [st.op_type for st in sess._engine.plan.steps]
    assert order == ["MemcpyFromHost", "Relu", "MemcpyToHost", "Neg", "EventWait", "Sub"]
    stream = fake_streams.last.stream  # type: ignore[union-attr]
    assert isinstance(stream, FakeStream)
    (y,) = sess.run(None, {"x0": X, "x1": X})
    np.testing.assert_array_equal(y, np.maximum(X, 0) + X)  # no sentinel: the copy landed
    assert stream.events == 1 and stream.waits == 1


def test_values_of_one_producer_go_to_the_host_in_one_batch_waited_by_each_reader() -> None:
    factory = FakeDeviceProviderFactory(ops=("Split",), streams=True)
    nodes = [
        helper.make_node("Split", ["x0"], ["p", "q"], name="split", num_outputs=2),
        helper.make_node("Neg", ["p"], ["y0"], name="neg_p"),
        helper.make_node("Neg", ["q"], ["y1"], name="neg_q"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2]) for y in ("y0", "y1")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with _registered(factory):
        sess = turnout.InferenceSession(model, providers=[factory.name])
        order = [(st.op_type, st.inputs) for st in sess._engine.plan.steps]
        assert [op for op, _ in order].count("EventWait") == 2
        assert [ins for op, ins in order if op == "MemcpyToHost"] == [("p", "q")]
        y0, y1 = sess.run(None, {"x0": X})
        np.testing.assert_array_equal(y0, -X[:2])
        np.testing.assert_array_equal(y1, -X[2:])


def test_a_stream_copy_lands_only_when_its_event_is_waited_for() -> None:
    stream = FakeStream(Device("fake"))
    transfer = FakeDataTransfer(Device("fake"))
    host = np.empty(4, np.float32)
    transfer.copy_tensors([(FakeDeviceArray(X.copy()), host)], stream)
    assert (host == SENTINEL).all()  # why the test above proves the executor waited
    stream.record().wait()
    np.testing.assert_array_equal(host, X)


def test_graph_outputs_are_waited_for_before_the_run_returns(
    fake_streams: FakeDeviceProviderFactory,
) -> None:
    sess = turnout.InferenceSession(_chain(), providers=[fake_streams.name])
    assert sess._engine.plan.steps[-1].op_type == "EventWait"
    (y,) = sess.run(None, {"x0": X})
    np.testing.assert_array_equal(y, (2 * np.maximum(X, 0)) ** 2)


def test_pruned_plans_keep_the_wait(fake_streams: FakeDeviceProviderFactory) -> None:
    sess = turnout.InferenceSession(_crossing(), providers=[fake_streams.name])
    ro = turnout.RunOptions()
    ro.only_execute_path_to_fetches = True
    (y,) = sess.run(["y"], {"x0": X, "x1": X}, ro)
    np.testing.assert_array_equal(y, np.maximum(X, 0) + X)


def test_kernels_allocate_through_their_context_and_see_the_stream(
    fake_streams: FakeDeviceProviderFactory,
) -> None:
    seen: list[Any] = []

    class Provider(ExecutionProvider):
        def __init__(self, options: dict[str, Any], factory: ProviderFactory) -> None:
            super().__init__(options, factory)
            self.allocator = CountingAllocator(self.device)

            @self.kernels.register("Relu", since=1)
            def relu(kn: KernelNode) -> Any:
                ctx = kn.context
                assert ctx is not None
                seen.append(ctx.stream)

                def run(x: np.ndarray) -> tuple[np.ndarray]:
                    out = ctx.allocate(x.shape, x.dtype)
                    np.maximum(x, 0, out=out)
                    return (out,)

                return run

    class CountingAllocator(Allocator):
        made = 0

        def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
            CountingAllocator.made += 1
            return np.empty(shape, dtype)

    class Factory(ProviderFactory):
        name = "AllocatingExecutionProvider"
        contract_version = CONTRACT_VERSION

        def _create(self, options: dict[str, Any]) -> ExecutionProvider:
            return Provider(options, self)

    with _registered(Factory()):
        model = float_graph_model([helper.make_node("Relu", ["x0"], ["y"], name="r")], ["y"])
        sess = turnout.InferenceSession(model, providers=[Factory.name])
        (y,) = sess.run(None, {"x0": X})
        np.testing.assert_array_equal(y, np.maximum(X, 0))
        assert CountingAllocator.made == 1 and seen == [None]  # no streams: None
        assert sess._engine.providers[0].allocator.device == Device("cpu")


def test_the_provider_takes_its_name_and_device_from_the_factory(
    fake: FakeDeviceProviderFactory,
) -> None:
    turnout.InferenceSession(_chain(), providers=[fake.name])
    p = fake.last
    assert p is not None and p.name == fake.name
    assert p.device == p.allocator.device == p.data_transfer.device == Device("fake", 0)
    entry = fake.probe().devices[0]
    assert entry.device == p.device


class _OffDevice(ExecutionProvider):
    name = "OffDeviceExecutionProvider"
    device = Device("elsewhere", 0)


def _off_factory(version: int) -> ProviderFactory:
    class Factory(ProviderFactory):
        name = "OffDeviceExecutionProvider"
        device_type = "fake"
        contract_version = version

        def _create(self, options: dict[str, Any]) -> ExecutionProvider:
            return _OffDevice(options)

        def create_allocator(self, device: Device) -> Allocator:
            return FakeAllocator(device)

        def create_data_transfer(self, device: Device) -> DataTransfer:
            return FakeDataTransfer(device)

    return Factory()


def test_a_contract_2_provider_on_another_device_than_its_factory_is_refused() -> None:
    with pytest.raises(EPFail, match="OffDeviceExecutionProvider: its provider is on elsewhere:0"):
        create_provider(_off_factory(CONTRACT_VERSION))


def test_a_contract_1_provider_keeps_its_own_declarations() -> None:
    provider = create_provider(_off_factory(1))
    assert provider.device == Device("elsewhere", 0)
    assert provider.allocator.device == provider.data_transfer.device == provider.device


def test_a_contract_1_transfer_copies_to_the_host_one_by_one_and_cannot_fill_a_device_buffer() -> (
    None
):
    transfer = DataTransfer()
    assert not transfer.batched and FakeDataTransfer(Device("fake")).batched
    host = np.zeros(4, np.float32)
    transfer.copy_tensors([(X, host)])
    np.testing.assert_array_equal(host, X)
    with pytest.raises(NotImplemented, match="DataTransfer cannot copy into a FakeDeviceArray"):
        transfer.copy_tensors([(X, FakeDeviceArray(host))])


def test_capi_copy_tensors_batches_per_device_and_uses_the_sync_stream(
    fake_streams: FakeDeviceProviderFactory,
) -> None:
    (ep_device,) = [d for d in turnout.get_ep_devices() if d.ep_name == fake_streams.name]
    stream = ep_device.create_sync_stream()
    assert isinstance(stream, turnout.OrtSyncStream) and stream.get_handle() == 0
    src = [turnout.OrtValue.ortvalue_from_numpy(X * k) for k in (1, 2)]
    dst = [turnout.OrtValue.ortvalue_from_shape_and_type([4], np.float32, "fake") for _ in src]
    transfer = devices.transfer_for("fake")
    before = len(transfer.batches)  # type: ignore[attr-defined]
    turnout.copy_tensors(src, dst, stream)
    assert transfer.batches[before:] == [2]  # type: ignore[attr-defined]
    assert stream._stream.waits == 1  # enqueued on the stream, landed before the call returned
    back = [turnout.OrtValue.ortvalue_from_numpy(np.zeros(4, np.float32)) for _ in src]
    turnout.copy_tensors(dst, back)
    np.testing.assert_array_equal(back[1].numpy(), 2 * X)


def test_profiled_peaks_put_copies_to_the_host_on_the_host_and_count_them_once(
    fake_streams: FakeDeviceProviderFactory,
) -> None:
    opts = turnout.SessionOptions()
    opts.enable_profiling = True
    sess = turnout.InferenceSession(_crossing(), opts, providers=[fake_streams.name])
    sess.run(None, {"x0": X, "x1": X})
    sizes = sess._engine.plan.last_sizes
    assert sizes["a@cpu"] == sizes["a@cpu~"] == X.nbytes  # the EventWait hands the array on
    peak = sess._engine.peak(sess._engine.plan, sizes)
    # the device: x0's upload and a; the host: a's copy, c and y (born before Sub's inputs die)
    assert peak == {"fake:0": 2 * X.nbytes, "cpu": 3 * X.nbytes}


def test_io_binding_writes_outputs_into_bound_device_and_host_values(
    fake: FakeDeviceProviderFactory,
) -> None:
    model = float_graph_model(
        [
            helper.make_node("Relu", ["x0"], ["y0"], name="r"),
            helper.make_node("Add", ["y0", "y0"], ["y1"], name="a"),
        ],
        ["y0", "y1"],
    )
    sess = turnout.InferenceSession(model, providers=[fake.name])
    on_device = turnout.OrtValue.ortvalue_from_shape_and_type([4], np.float32, "fake")
    on_host = turnout.OrtValue.ortvalue_from_numpy(np.zeros(4, np.float32))
    binding = sess.io_binding()
    binding.bind_cpu_input("x0", X)
    binding.bind_ortvalue_output("y0", on_device)
    binding.bind_ortvalue_output("y1", on_host)
    transfer = devices.transfer_for("fake")
    before = len(transfer.batches)  # type: ignore[attr-defined]
    sess.run_with_iobinding(binding)
    # y0 stays on the device and is copied into its bound buffer there (one transfer call);
    # y1 comes to the host in the plan (the session's transfer) and into the bound host array
    assert transfer.batches[before:] == [1]  # type: ignore[attr-defined]
    y0, y1 = binding.get_outputs()
    assert y0 is on_device and y1 is on_host
    np.testing.assert_array_equal(on_device.numpy(), np.maximum(X, 0))
    np.testing.assert_array_equal(on_host.numpy(), 2 * np.maximum(X, 0))


class _SecondFake(FakeDeviceProviderFactory):
    """Another provider on the same fake device."""

    name = "SecondFakeExecutionProvider"
    aliases = ("fake2",)


def test_a_value_crossing_providers_on_one_device_waits_for_the_makers_stream() -> None:
    first = FakeDeviceProviderFactory(ops=("Relu",), streams=True)
    second = _SecondFake(ops=("Add",))
    model = float_graph_model(
        [
            helper.make_node("Relu", ["x0"], ["a"], name="relu"),
            helper.make_node("Add", ["a", "a"], ["y"], name="add"),
        ],
        ["y"],
    )
    with _registered(first, second):
        sess = turnout.InferenceSession(model, providers=[first.name, second.name])
        steps = sess._engine.plan.steps
        placed = {st.name: st.provider for st in steps}
        assert placed["relu"] == first.name and placed["add"] == second.name
        (sync,) = [st for st in steps if st.inputs == ("a",) and st.op_type == "EventWait"]
        add = next(st for st in steps if st.name == "add")
        assert add.inputs == sync.outputs * 2
        assert steps.index(sync) == steps.index(add) - 1
        stream = first.last.stream  # type: ignore[union-attr]
        events = stream.events
        (y,) = sess.run(None, {"x0": X})
        np.testing.assert_array_equal(y, 2 * np.maximum(X, 0))
        assert stream.events > events and stream.waits >= 1
