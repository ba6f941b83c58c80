"""A test-only provider on a fake device, so partitioning, copies and IO binding are tested on
any machine. Its buffers live in host memory but are a distinct type (`FakeDeviceArray`): a
kernel that receives a host array, or a host kernel that receives a device buffer, fails
loudly, so a missing or extra copy cannot go unnoticed.

    from turnout_testbed.fake_device import FakeDeviceProviderFactory
    turnout.register_provider(FakeDeviceProviderFactory(ops={"Relu", "Add"}))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.ep import (
    CONTRACT_VERSION,
    Allocator,
    Availability,
    DataTransfer,
    Device,
    DeviceEntry,
    Event,
    ExecutionProvider,
    KernelFn,
    KernelNode,
    KernelTable,
    ProviderFactory,
    ProviderOption,
    Stream,
)

__all__ = [
    "FakeAllocator",
    "FakeDataTransfer",
    "FakeDeviceArray",
    "FakeDeviceProvider",
    "FakeDeviceProviderFactory",
    "FakeStream",
]


class FakeDeviceArray:
    """A buffer 'on the fake device': wraps a host array, is not one."""

    __slots__ = ("data",)

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.data.dtype

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def __repr__(self) -> str:
        return f"FakeDeviceArray({self.data.dtype}{list(self.data.shape)})"


class FakeEvent(Event):
    """Done once the stream's work before it has run: waiting runs it."""

    def __init__(self, stream: FakeStream) -> None:
        self.stream = stream

    def wait(self) -> None:
        self.stream.waits += 1
        self.stream.synchronize()


class FakeStream(Stream):
    """A stream whose copies really are late: `copy_tensors` on it only queues them, and they
    land when an event is waited for or a kernel runs (the stream is in order). A reader that
    skips the wait reads the sentinel the destination was filled with."""

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.queued: list[Any] = []
        self.events = 0  # recorded
        self.waits = 0  # events waited for

    def record(self) -> Event:
        self.events += 1
        return FakeEvent(self)

    def synchronize(self) -> None:
        while self.queued:
            self.queued.pop(0)()


SENTINEL = -12345.0
"""What an enqueued copy's host destination holds until the copy lands."""


class FakeAllocator(Allocator):
    """Fake-device buffers, counted: `empties` made, `frees` handed back by the plan."""

    pools = True

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.empties = 0
        self.frees = 0

    def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        self.empties += 1
        return FakeDeviceArray(np.empty(shape, dtype))

    def _free(self, value: Any) -> None:
        if isinstance(value, FakeDeviceArray):
            self.frees += 1


class FakeDataTransfer(DataTransfer):
    batched = True

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.to_device_count = 0
        self.to_host_count = 0
        self.batches: list[int] = []  # pairs per copy_tensors call

    def is_device_value(self, value: Any) -> bool:
        return isinstance(value, FakeDeviceArray)

    def copy_tensors(self, pairs: Sequence[tuple[Any, Any]], stream: Stream | None = None) -> None:
        self.batches.append(len(pairs))
        for src, dst in pairs:
            if isinstance(dst, FakeDeviceArray):
                self.to_device_count += 1
                target = dst.data
                data = src.data if isinstance(src, FakeDeviceArray) else np.asarray(src)
            else:
                self.to_host_count += 1
                target, data = dst, src.data
            if isinstance(stream, FakeStream):
                target[...] = SENTINEL
                stream.queued.append(lambda t=target, d=data: np.copyto(t, d))
            else:
                np.copyto(target, data)

    def _to_device(self, value: Any, device: Device) -> Any:
        if isinstance(value, FakeDeviceArray):
            return value
        if not isinstance(value, np.ndarray):
            raise InvalidArgument(f"fake device holds tensors only, not {type(value).__name__}")
        self.to_device_count += 1
        return FakeDeviceArray(np.array(value, copy=True))

    def _to_host(self, value: Any) -> np.ndarray:
        if not isinstance(value, FakeDeviceArray):
            raise InvalidArgument(f"expected a fake-device buffer, got {type(value).__name__}")
        self.to_host_count += 1
        return np.array(value.data, copy=True)


def _device_only(fn: Any, op: str, stream: Stream | None) -> KernelFn:
    def run(*inputs: Any) -> tuple[Any, ...]:
        if stream is not None:  # in order: what the stream holds runs first
            stream.synchronize()
        for x in inputs:
            if x is not None and not isinstance(x, FakeDeviceArray):
                raise TypeError(f"fake-device {op} kernel got a host value {type(x).__name__}")
        outs = fn(*[x.data if x is not None else None for x in inputs])
        return tuple(FakeDeviceArray(np.asarray(o)) for o in outs)

    return run


_NUMPY_KERNELS: dict[str, Any] = {
    "Relu": lambda x: (np.maximum(x, x.dtype.type(0)),),
    "Neg": lambda x: (np.negative(x),),
    "Abs": lambda x: (np.abs(x),),
    "Exp": lambda x: (np.exp(x),),
    "Add": lambda a, b: (a + b,),
    "Sub": lambda a, b: (a - b,),
    "Mul": lambda a, b: (a * b,),
    "MatMul": lambda a, b: (np.matmul(a, b),),
    "Sigmoid": lambda x: (1 / (1 + np.exp(-x)),),
    "Split": lambda x: tuple(np.split(x, 2)),  # two halves along axis 0
}


class FakeDeviceProvider(ExecutionProvider):
    def __init__(
        self,
        options: dict[str, Any],
        ops: Iterable[str],
        calls: Counter[str],
        factory: FakeDeviceProviderFactory,
    ) -> None:
        super().__init__(options, factory)
        self.kernels = KernelTable(self.name)
        self.allocator = FakeAllocator(self.device)
        self.data_transfer = FakeDataTransfer(self.device)
        self.stream = FakeStream(self.device) if factory.streams else None
        for op in ops:
            self._register(op, calls)

    def _register(self, op: str, calls: Counter[str]) -> None:
        if op not in _NUMPY_KERNELS:
            raise InvalidArgument(f"fake device has no kernel for {op}")
        impl = _NUMPY_KERNELS[op]

        def factory(node: KernelNode, _impl: Any = impl, _op: str = op) -> KernelFn:
            run = _device_only(_impl, _op, self.stream)

            def counted(*inputs: Any) -> Sequence[Any]:
                calls[_op] += 1
                return run(*inputs)

            return counted

        self.kernels.register(op, since=1)(factory)


class FakeDeviceProviderFactory(ProviderFactory):
    """Claims the given ops on the fake device; `calls` counts kernel runs per op type.
    `streams`: give the provider a `FakeStream`, so copies to the host are asynchronous."""

    name = "FakeDeviceExecutionProvider"
    aliases = ("fake",)
    default_priority = 10
    options = (ProviderOption("note", (str,), "", "Free text, for option plumbing tests."),)
    device_type = "fake"
    version = "test"
    contract_version = CONTRACT_VERSION

    def __init__(
        self,
        ops: Iterable[str] = ("Relu", "Add", "Mul"),
        hardware_type: str = "gpu",
        streams: bool = False,
    ) -> None:
        self.ops = tuple(ops)
        self.streams = streams
        self.hardware_type = hardware_type  # what get_ep_devices() reports it as
        self.calls: Counter[str] = Counter()
        self.last: FakeDeviceProvider | None = None
        self._sync_stream: Stream | None = None

    def _probe(self) -> Availability:
        entry = DeviceEntry(
            self.device(), {"kind": "test double"}, hardware_type=self.hardware_type
        )
        return Availability(True, (entry,), version="test")

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        self.last = FakeDeviceProvider(options, self.ops, self.calls, self)
        return self.last

    def create_allocator(self, device: Device) -> Allocator:
        return FakeAllocator(device)

    def create_data_transfer(self, device: Device) -> DataTransfer:
        return FakeDataTransfer(device)

    def sync_stream(self) -> Stream | None:
        if self.streams and self._sync_stream is None:
            self._sync_stream = FakeStream(self.device())
        return self._sync_stream
