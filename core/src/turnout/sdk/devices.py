"""Device values outside a session: which provider owns a device type, and copies to and from it.

A value on a device is whatever buffer its provider uses (a CuPy array, a pyopencl Array, ...);
turnout only moves it through that provider's `DataTransfer`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import DataTransfer, Device

__all__ = ["is_cpu", "parse_device", "to_device", "to_host", "transfer_for"]


def parse_device(device_type: str, device_id: int = 0) -> Device:
    """`Device` from ORT-style arguments ("cuda", 1) or a "cuda:1" string; checks it is known."""
    kind = str(device_type).lower()
    if ":" in kind:
        kind, _, idx = kind.partition(":")
        device_id = int(idx)
    if kind == "cpu":
        return Device("cpu", 0)
    try:
        transfer_for(kind)
    except InvalidArgument as e:
        raise InvalidArgument(f"device {device_type!r} (id {device_id}): {e}") from None
    return Device(kind, int(device_id))


def is_cpu(device: Device) -> bool:
    return device.type == "cpu"


@functools.cache
def _transfer(device_type: str) -> DataTransfer:
    from turnout.sdk.plugins import registry

    for factory in registry.all():
        if factory.device_type == device_type:
            availability = registry.probe(factory)
            if not availability.ok:
                raise InvalidArgument(f"{factory.name} is not available: {availability.reason}")
            return factory.data_transfer()
    known = sorted({f.device_type for f in registry.all()})
    raise InvalidArgument(f"no execution provider for it is loaded (known device types: {known})")


def transfer_for(device_type: str) -> DataTransfer:
    return _transfer(device_type)


def to_device(value: Any, device: Device) -> Any:
    if is_cpu(device):
        return to_host(value)
    return transfer_for(device.type).to_device(value, device)


def to_host(value: Any, device: Device | None = None) -> Any:
    """A host value; device buffers are copied through their provider's transfer."""
    if isinstance(value, np.ndarray) or value is None or device is None or is_cpu(device):
        return value
    return transfer_for(device.type).to_host(value)


def clear_cache() -> None:
    """Forget device-type lookups (after registering or removing providers)."""
    _transfer.cache_clear()
