"""CuPyProviderFactory: probe (the CUDA stack, or exactly why it cannot run here) and create
(validated `device_id`, `stream` and `fuse` options)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.graph.errors import EPFail, InvalidArgument
from turnout.sdk.ep import (
    CONTRACT_VERSION,
    Allocator,
    Availability,
    DataTransfer,
    Device,
    ExecutionProvider,
    ProviderFactory,
    Stream,
)
from turnout.sdk.provider_options import ProviderOption

from . import ALIASES, PROVIDER_NAME, __version__, probe

__all__ = ["OPTIONS", "CuPyProviderFactory"]

OPTIONS = (
    ProviderOption("device_id", (int,), 0, "Index of the CUDA device (as CuPy numbers them)", 0),
    ProviderOption(
        "stream",
        (int,),
        0,
        "A cudaStream_t (as an int, like onnxruntime's user_compute_stream) the session's "
        "kernels and copies run on; 0: the session makes its own non-blocking stream",
        minimum=0,
    ),
    ProviderOption(
        "fuse", (bool,), True, "Compile connected elementwise nodes into one CUDA kernel"
    ),
)


class CuPyProviderFactory(ProviderFactory):
    name = PROVIDER_NAME
    aliases = ALIASES
    default_priority = 100
    options = OPTIONS
    version = __version__
    vendor = "turnout"
    contract_version = CONTRACT_VERSION
    device_type = "cuda"

    def __init__(self) -> None:
        self._streams: dict[int, Any] = {}

    def _probe(self) -> Availability:
        return probe.decide(probe.gather(), __version__)

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        avail = self.probe()
        if not avail.ok:
            raise EPFail(f"{self.name} cannot run here: {avail.reason}")
        device_id = int(options["device_id"])
        if device_id >= len(avail.devices):
            raise InvalidArgument(
                f"{self.name}: device_id {device_id} requested; "
                f"{len(avail.devices)} CUDA device(s) present"
            )
        from .backend import cupy_backend
        from .provider import CuPyExecutionProvider, make_stream

        stream = make_stream(device_id, int(options["stream"]))
        return CuPyExecutionProvider(options, self, cupy_backend(self.device(device_id), stream))

    def create_allocator(self, device: Device) -> Allocator:
        """Device memory from CuPy's pool on `device` (sessions use the same type)."""
        from .allocator import CuPyAllocator

        return CuPyAllocator(device)

    def create_data_transfer(self, device: Device) -> DataTransfer:
        """Copies to and from `device` outside a session, enqueued on that device's stream
        (a session's transfer uses the session's stream instead)."""
        from .data_transfer import CuPyDataTransfer

        return CuPyDataTransfer(device, self._stream(device.id))

    def sync_stream(self) -> Stream | None:
        """A stream of device 0 for copies outside a session (`create_sync_stream()`)."""
        if not hasattr(self, "_sync_stream"):
            from .stream import CuPyStream

            self._sync_stream = CuPyStream(self._stream(0), self.device(0))
        return self._sync_stream

    def _stream(self, device_id: int) -> Any:
        """The stream that copies outside a session enqueue on, one per device."""
        if device_id not in self._streams:
            from .provider import make_stream

            self._streams[device_id] = make_stream(device_id, 0)
        return self._streams[device_id]

    def expected_failures(self) -> Mapping[str, str]:
        from .expected_failures import EXPECTED_FAILURES

        return EXPECTED_FAILURES
