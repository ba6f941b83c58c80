"""Devices: where a provider's values live, and what `probe()` reports it can run on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CPU", "Availability", "Device", "DeviceEntry"]


@dataclass(frozen=True)
class Device:
    """Where a value lives: `Device("cpu")`, `Device("cuda", 1)`, `Device("opencl", 0)`."""

    type: str = "cpu"
    id: int = 0

    def __str__(self) -> str:
        return self.type if self.type == "cpu" else f"{self.type}:{self.id}"


CPU = Device("cpu", 0)


@dataclass(frozen=True)
class DeviceEntry:
    """One device a provider can run on, as `probe()` lists it (like ORT's EP-device entries)."""

    device: Device
    metadata: Mapping[str, str] = field(default_factory=dict)
    default_options: Mapping[str, Any] = field(default_factory=dict)
    hardware_type: str | None = None
    """"cpu", "gpu" or "npu" for a device that is not the host (an OpenCL device on PoCL is a
    CPU); `get_ep_devices()` and the selection policies read it. None: a GPU."""
    vendor: str = ""
    vendor_id: int = 0
    """The hardware vendor and its PCI vendor id, where the provider knows them."""


@dataclass(frozen=True)
class Availability:
    """`probe()`'s answer: whether the provider can run here, on what, and if not, exactly why."""

    ok: bool
    devices: tuple[DeviceEntry, ...] = ()
    reason: str | None = None
    version: str | None = None
