"""OpenCLProviderFactory: probe (OpenCL platforms and devices, or exactly why there are none)
and create (validated `platform`, `device_type`, `device_id` options)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import (
    CONTRACT_VERSION,
    Allocator,
    Availability,
    DataTransfer,
    Device,
    DeviceEntry,
    ExecutionProvider,
    ProviderFactory,
    Stream,
)
from turnout.sdk.provider_options import ProviderOption

from . import __version__

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["DEVICE_TYPES", "OpenCLProviderFactory", "select_device"]

DEVICE_TYPES = ("all", "default", "cpu", "gpu", "accelerator")


def _cl() -> Any:
    import pyopencl as cl

    return cl


def _devices_of(platform: Any, device_type: str) -> list[Any]:
    cl = _cl()
    kind = getattr(cl.device_type, device_type.upper())
    try:
        return list(platform.get_devices(device_type=kind))
    except cl.Error:  # DEVICE_NOT_FOUND: this platform has none of that type
        return []


def _platforms() -> list[Any]:
    cl = _cl()
    try:
        return list(cl.get_platforms())
    except cl.Error as e:  # PLATFORM_NOT_FOUND_KHR when the ICD loader finds no vendor
        raise LookupError(f"no OpenCL ICD or platform found ({e})") from None


def select_device(options: Mapping[str, Any]) -> tuple[Any, int]:
    """The pyopencl device the options pick, and its index among the matching devices.

    Raises LookupError with the exact reason when nothing matches.
    """
    platforms = _platforms()
    if not platforms:
        raise LookupError("no OpenCL ICD or platform found")
    want = options.get("platform")
    if isinstance(want, int):
        if want >= len(platforms):
            raise LookupError(f"platform {want} requested; only {len(platforms)} present")
        platforms = [platforms[want]]
    elif isinstance(want, str):
        platforms = [p for p in platforms if want.lower() in p.name.lower()]
        if not platforms:
            raise LookupError(f"no OpenCL platform name contains {want!r}")
    kind = options.get("device_type", "all")
    devices = [d for p in platforms for d in _devices_of(p, kind)]
    if not devices:
        names = ", ".join(p.name for p in platforms)
        raise LookupError(f"no OpenCL device of type {kind!r} on platform(s) {names}")
    idx = int(options.get("device_id", 0))
    if idx >= len(devices):
        raise LookupError(f"device_id {idx} requested; {len(devices)} {kind} device(s) present")
    return devices[idx], idx


def device_metadata(d: Any) -> dict[str, str]:
    ext = d.extensions.split()
    return {
        "name": d.name.strip(),
        "platform": d.platform.name.strip(),
        "version": d.version.strip(),
        "driver": d.driver_version.strip(),
        "type": _cl().device_type.to_string(d.type).lower(),
        "fp64": str("cl_khr_fp64" in ext).lower(),
        "fp16": str("cl_khr_fp16" in ext).lower(),
        "max_work_group_size": str(d.max_work_group_size),
        "global_mem_bytes": str(d.global_mem_size),
    }


def hardware_type(d: Any) -> str:
    """What `get_ep_devices()` calls an OpenCL device: a GPU, a CPU (PoCL's device is the
    host CPU) or an NPU (an accelerator device)."""
    cl = _cl()
    if d.type & cl.device_type.GPU:
        return "gpu"
    if d.type & cl.device_type.ACCELERATOR:
        return "npu"
    return "cpu"


class OpenCLProviderFactory(ProviderFactory):
    name = "OpenCLExecutionProvider"
    aliases = ("opencl",)
    default_priority = 50
    options = (
        ProviderOption(
            "platform",
            (int, str),
            None,
            "OpenCL platform: its index, or a substring of its name (default: all platforms)",
            minimum=0,
        ),
        ProviderOption(
            "device_type", (str,), "all", "Which devices to choose from", choices=DEVICE_TYPES
        ),
        ProviderOption("device_id", (int,), 0, "Index among the devices of that type", minimum=0),
    )
    version = __version__
    vendor = "turnout"
    contract_version = CONTRACT_VERSION
    device_type = "opencl"

    def __init__(self) -> None:
        self._runtimes: dict[int, Runtime] = {}

    def _probe(self) -> Availability:
        try:
            cl = _cl()
        except Exception as e:
            return Availability(
                False, reason=f"pyopencl cannot be imported: {type(e).__name__}: {e}"
            )
        try:
            platforms = _platforms()
        except LookupError as e:
            return Availability(False, reason=str(e))
        if not platforms:
            return Availability(False, reason="no OpenCL ICD or platform found")
        entries: list[DeviceEntry] = []
        for pi, p in enumerate(platforms):
            for di, d in enumerate(_devices_of(p, "all")):
                entries.append(
                    DeviceEntry(
                        self.device(len(entries)),
                        device_metadata(d),
                        {"platform": pi, "device_type": "all", "device_id": di},
                        hardware_type=hardware_type(d),
                        vendor=str(d.vendor),
                        vendor_id=int(d.vendor_id),
                    )
                )
        if not entries:
            names = ", ".join(p.name for p in platforms)
            return Availability(False, reason=f"no OpenCL device on platform(s) {names}")
        return Availability(
            True, tuple(entries), version=f"{__version__} (pyopencl {cl.VERSION_TEXT})"
        )

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        try:
            device, index = select_device(options)
        except LookupError as e:
            raise InvalidArgument(f"{self.name}: {e}") from None
        from .provider import OpenCLExecutionProvider

        return OpenCLExecutionProvider(options, device, index, self)

    def create_allocator(self, device: Device) -> Allocator:
        """Buffers of `device` outside a session (OrtValues); a session allocates from its
        own context's pool."""
        return self._outside(device).allocator

    def create_data_transfer(self, device: Device) -> DataTransfer:
        """Copies to and from `device` outside a session, on that device's own context and
        queue (a session copies on its own queue)."""
        from .data_transfer import OpenCLDataTransfer

        return OpenCLDataTransfer(self._outside(device).allocator)

    def sync_stream(self) -> Stream | None:
        return self._outside(self.device()).stream

    def _outside(self, device: Device) -> Runtime:
        """The context and queue of `device` (a probe entry's index) outside sessions."""
        if device.id not in self._runtimes:
            entries = self.probe().devices
            if device.id >= len(entries):
                raise InvalidArgument(
                    f"{self.name}: no OpenCL device {device} ({len(entries)} present)"
                )
            cl_device, index = select_device(dict(entries[device.id].default_options))
            from .runtime import Runtime

            self._runtimes[device.id] = Runtime(cl_device, index, device)
        return self._runtimes[device.id]

    def expected_failures(self) -> Mapping[str, str]:
        from .expected_failures import EXPECTED_FAILURES

        return EXPECTED_FAILURES
