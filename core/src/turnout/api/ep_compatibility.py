"""Compiled models against this machine: compatibility strings, hardware devices, kernels.

onnxruntime (1.23 and later) lets an application ask, before creating a session, whether a
compiled model suits the EP devices it has: read the compatibility string the compiler wrote
into the model (`get_compatibility_info_from_model`), then ask the provider about it
(`get_model_compatibility_for_ep_devices`). In turnout the string is each provider's
`compatibility_info()`, which `turnout.engine.artifact` records for every provider a model was
compiled for, under onnxruntime's metadata key (`ep_compatibility_info.<provider>`) as well as
in turnout's own entry. The provider judges it the way a session loading the model does: the
same string runs, any other is refused (`EP_UNSUPPORTED`); a provider that compiles nothing
has nothing to judge (`EP_NOT_APPLICABLE`, as onnxruntime's CPU provider).

The hardware devices are those the providers' probes list (`DeviceEntry`), and a provider's
incompatibility with one of them is what its probe says: unavailable here (a missing
dependency, with the probe's reason) or not one of the devices it runs on.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError

from turnout.api.ep_devices import OrtEpDevice, OrtHardwareDevice, get_ep_devices, hardware_of
from turnout.engine.artifact import EP_COMPAT_KEY, read_artifact
from turnout.engine.provider_creation import create_provider
from turnout.graph.errors import InvalidArgument, InvalidProtobuf, NoSuchFile
from turnout.sdk.ep import ExecutionProvider, ProviderFactory

__all__ = [
    "OrtCompiledModelCompatibility",
    "OrtDeviceEpIncompatibilityReason",
    "get_compatibility_info_from_model",
    "get_compatibility_info_from_model_bytes",
    "get_hardware_device_ep_incompatibility_details",
    "get_hardware_devices",
    "get_model_compatibility_for_ep_devices",
    "provider_for",
]


class OrtCompiledModelCompatibility(enum.IntEnum):
    """How a compiled model suits a provider's devices (onnxruntime's values)."""

    EP_NOT_APPLICABLE = 0
    """The provider compiles nothing, so it has no opinion (the numpy CPU provider)."""
    EP_SUPPORTED_OPTIMAL = 1
    """Compiled by this provider for these devices and options: it runs as compiled."""
    EP_SUPPORTED_PREFER_RECOMPILATION = 2
    """Runs, but compiling again would do better (turnout never answers this: it runs a
    compiled model exactly as compiled or not at all)."""
    EP_UNSUPPORTED = 3
    """A session would refuse the compiled data (another version, device or options)."""


class OrtDeviceEpIncompatibilityReason(enum.IntEnum):
    """Why a provider cannot use a hardware device: bits of a mask (onnxruntime's values)."""

    NONE = 0
    DRIVER_INCOMPATIBLE = 1
    """Not given by turnout's probes, which say only "unavailable" and why."""
    DEVICE_INCOMPATIBLE = 2
    """The device is not one the provider's probe lists."""
    MISSING_DEPENDENCY = 4
    """The provider is unavailable here (its probe's reason is in the notes)."""
    UNKNOWN = -(2**31)


def get_compatibility_info_from_model(model_path: str | os.PathLike[str], ep_type: str) -> Any:
    """The compatibility string the model was compiled with for provider `ep_type`, or None
    (a plain model, or one compiled for other providers). Only the model's metadata is read:
    its external data is not loaded."""
    path = os.fspath(model_path)
    _check_ep_type(ep_type)
    if not path:
        raise InvalidArgument("get_compatibility_info_from_model: the model path is empty")
    if not Path(path).is_file():
        raise NoSuchFile(f"get_compatibility_info_from_model: no such file {path!r}")
    with open(path, "rb") as f:
        data = f.read()
    return _compat_of(_parse(data, path), ep_type)


def get_compatibility_info_from_model_bytes(model_data: Any, ep_type: str) -> Any:
    """`get_compatibility_info_from_model` for a model in memory (bytes, bytearray,
    memoryview or any buffer)."""
    data = bytes(memoryview(model_data))
    _check_ep_type(ep_type)
    if not data:
        raise InvalidArgument("get_compatibility_info_from_model_bytes: the model data is empty")
    return _compat_of(_parse(data, "the model bytes"), ep_type)


def _check_ep_type(ep_type: str) -> None:
    if not isinstance(ep_type, str) or not ep_type:
        raise InvalidArgument("the execution provider type must be a non-empty string")


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as e:
        raise InvalidProtobuf(f"{what} is not an ONNX model: {e}") from None
    return model


def _compat_of(model: onnx.ModelProto, ep_type: str) -> str | None:
    from turnout.sdk.plugins import registry

    found = registry.find(ep_type)
    names = {ep_type} if found is None else {ep_type, found.name, *found.aliases}
    for p in model.metadata_props:
        if p.key.startswith(EP_COMPAT_KEY) and p.key[len(EP_COMPAT_KEY) :] in names:
            return str(p.value)
    artifact = read_artifact(model, None)  # a model written before the onnxruntime key
    if artifact is not None:
        for entry in artifact.entries:
            if entry.provider in names:
                return entry.compatibility
    return None


def provider_for(factory: ProviderFactory, options: Any) -> ExecutionProvider:
    """A provider made only to be asked about itself (its compatibility string, its kernels)."""
    return create_provider(factory, {str(k): v for k, v in dict(options or {}).items()})


def get_model_compatibility_for_ep_devices(
    ep_devices: Sequence[OrtEpDevice], compatibility_info: str
) -> OrtCompiledModelCompatibility:
    """Whether a model compiled with `compatibility_info` runs as compiled on these devices of
    one provider: the provider on each device (with the device's options) is asked for its
    own compatibility string. Equal: `EP_SUPPORTED_OPTIMAL`; different: `EP_UNSUPPORTED` (a
    session would refuse the compiled data); a provider that compiles nothing:
    `EP_NOT_APPLICABLE`. The least suitable device decides."""
    if not isinstance(compatibility_info, str):
        raise TypeError(
            "get_model_compatibility_for_ep_devices: compatibility_info must be a str, not "
            f"{type(compatibility_info).__name__}"
        )
    devices = list(ep_devices)
    if not devices:
        raise InvalidArgument("get_model_compatibility_for_ep_devices: no EP devices given")
    names = sorted({d.ep_name for d in devices})
    if len(names) > 1:
        raise InvalidArgument(
            "get_model_compatibility_for_ep_devices: all devices must belong to one execution "
            f"provider, got {', '.join(names)}"
        )
    from turnout.sdk.plugins import registry

    factory = registry.resolve(names[0])
    worst = OrtCompiledModelCompatibility.EP_NOT_APPLICABLE
    for device in devices:
        if device.unavailable_reason is not None:
            return OrtCompiledModelCompatibility.EP_UNSUPPORTED
        now = provider_for(factory, device.ep_options).compatibility_info()
        if not now:
            continue
        if now != compatibility_info:
            return OrtCompiledModelCompatibility.EP_UNSUPPORTED
        worst = OrtCompiledModelCompatibility.EP_SUPPORTED_OPTIMAL
    return worst


def get_hardware_devices() -> list[OrtHardwareDevice]:
    """The hardware the available providers run on, each device once (as the first provider
    by priority describes it), the host CPU among them (the numpy CPU provider runs there)."""
    seen: dict[tuple[int, int, int], OrtHardwareDevice] = {}
    for d in get_ep_devices():
        hw = d.device
        seen.setdefault(_key(hw), hw)
    return list(seen.values())


def _key(hw: OrtHardwareDevice) -> tuple[int, int, int]:
    """One physical device: its type, PCI vendor id and index (providers name the vendor
    differently: "Intel" from the host, "GenuineIntel" from PoCL)."""
    return (int(hw.type), hw.vendor_id, hw.device_id)


def get_hardware_device_ep_incompatibility_details(
    ep_name: str, hardware_device: OrtHardwareDevice
) -> dict[str, Any]:
    """Why provider `ep_name` cannot use `hardware_device`, as onnxruntime's dict:
    `reasons_bitmask` (`OrtDeviceEpIncompatibilityReason` bits, 0 when it can), `notes` (the
    probe's reason, or the devices it runs on) and `error_code` (0: turnout has none)."""
    if not isinstance(ep_name, str) or not ep_name:
        raise InvalidArgument("the execution provider name must be a non-empty string")
    if not isinstance(hardware_device, OrtHardwareDevice):
        raise TypeError(
            f"expected an OrtHardwareDevice (get_hardware_devices()), got "
            f"{type(hardware_device).__name__}"
        )
    from turnout.sdk.plugins import registry

    factory = registry.find(ep_name)
    if factory is None:
        raise InvalidArgument(f"No valid factory found for execution provider '{ep_name}'.")
    avail = registry.probe(factory)
    if not avail.ok:
        return _details(
            OrtDeviceEpIncompatibilityReason.MISSING_DEPENDENCY, avail.reason or "unavailable"
        )
    runs_on = [hardware_of(e) for e in avail.devices]
    if any(_key(hw) == _key(hardware_device) for hw in runs_on):
        return _details(OrtDeviceEpIncompatibilityReason.NONE, None)
    where = "; ".join(f"{hw.type.name} {hw.vendor or '?'} device {hw.device_id}" for hw in runs_on)
    return _details(
        OrtDeviceEpIncompatibilityReason.DEVICE_INCOMPATIBLE,
        f"{factory.name} runs on: {where or 'no device'}",
    )


def _details(reason: OrtDeviceEpIncompatibilityReason, notes: str | None) -> dict[str, Any]:
    return {"reasons_bitmask": int(reason), "notes": notes, "error_code": 0}
