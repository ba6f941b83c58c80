"""onnxruntime's device-centred provider API: EP devices, selection policies, a delegate.

onnxruntime (1.22 and later) lists `(execution provider, hardware device)` pairs with
`get_ep_devices()`; an application either adds providers for chosen devices
(`SessionOptions.add_provider_for_devices`) or lets a policy choose
(`set_provider_selection_policy`, `set_provider_selection_policy_delegate`). turnout builds
those pairs from each available provider's `probe()` entries (`DeviceEntry`), so a provider
declares its hardware once, in its probe, and the same entry drives listing and selection.

What a policy picks becomes an ordinary provider list: the chosen providers with their
devices' default options, then the CPU request (the host providers and the numpy kernels),
exactly as if the application had passed `providers=[...]`.
"""

from __future__ import annotations

import enum
import functools
import platform
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.engine.provider_selection import CPU_PROVIDER
from turnout.graph.errors import Fail, InvalidArgument
from turnout.sdk.provider import DeviceEntry, ProviderFactory

__all__ = [
    "EpSelectionDelegate",
    "OrtEpDevice",
    "OrtExecutionProviderDevicePolicy",
    "OrtHardwareDevice",
    "OrtHardwareDeviceType",
    "get_ep_devices",
    "hardware_of",
    "model_metadata",
    "policy_provider_specs",
    "specs_for_devices",
]


class OrtHardwareDeviceType(enum.IntEnum):
    """The kind of hardware under an EP device (onnxruntime's values)."""

    CPU = 0
    GPU = 1
    NPU = 2


class OrtExecutionProviderDevicePolicy(enum.IntEnum):
    """Automatic provider selection policies (onnxruntime's values and grouping: the
    efficiency and power policies prefer an NPU, maximum performance prefers a GPU)."""

    DEFAULT = 0
    PREFER_CPU = 1
    PREFER_NPU = 2
    PREFER_GPU = 3
    MAX_PERFORMANCE = 4
    MAX_EFFICIENCY = 5
    MIN_OVERALL_POWER = 6


_HARDWARE_NAMES = {
    "cpu": OrtHardwareDeviceType.CPU,
    "gpu": OrtHardwareDeviceType.GPU,
    "npu": OrtHardwareDeviceType.NPU,
}

# the hardware type each policy reaches for first; CPU is behind every choice
_PREFERRED = {
    OrtExecutionProviderDevicePolicy.DEFAULT: OrtHardwareDeviceType.CPU,
    OrtExecutionProviderDevicePolicy.PREFER_CPU: OrtHardwareDeviceType.CPU,
    OrtExecutionProviderDevicePolicy.PREFER_NPU: OrtHardwareDeviceType.NPU,
    OrtExecutionProviderDevicePolicy.MAX_EFFICIENCY: OrtHardwareDeviceType.NPU,
    OrtExecutionProviderDevicePolicy.MIN_OVERALL_POWER: OrtHardwareDeviceType.NPU,
    OrtExecutionProviderDevicePolicy.PREFER_GPU: OrtHardwareDeviceType.GPU,
    OrtExecutionProviderDevicePolicy.MAX_PERFORMANCE: OrtHardwareDeviceType.GPU,
}

# PCI vendor ids of the host CPU vendors /proc/cpuinfo names (what onnxruntime reports)
_CPU_VENDORS = {"AuthenticAMD": ("AMD", 0x1022), "GenuineIntel": ("Intel", 0x8086)}


@dataclass(frozen=True)
class OrtHardwareDevice:
    """A physical device: its type, vendor and ids, and what its provider says about it."""

    type: OrtHardwareDeviceType
    vendor_id: int
    vendor: str
    device_id: int
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OrtEpDevice:
    """One execution provider on one hardware device, as `get_ep_devices()` lists it.

    `ep_options` are the provider options that put the provider on this device (an OpenCL
    platform and device index, say); `add_provider_for_devices` passes them on.
    """

    ep_name: str
    ep_vendor: str
    ep_metadata: Mapping[str, str]
    ep_options: Mapping[str, str]
    device: OrtHardwareDevice
    memory_info: Any = None
    unavailable_reason: str | None = None
    """Set only on the entries `get_ep_devices(include_unavailable=True)` adds for providers
    that cannot run here: why not (no driver, no device, ...). Such an entry is never chosen."""

    @property
    def available(self) -> bool:
        """Whether the provider can run on this device here."""
        return self.unavailable_reason is None

    def create_sync_stream(self) -> Any:
        """An `OrtSyncStream` of the provider (`ProviderFactory.sync_stream`) for
        `copy_tensors`; its handle is 0 for a provider without streams."""
        from turnout.api.tensor_copies import OrtSyncStream
        from turnout.sdk.plugins import registry

        factory = registry.resolve(self.ep_name)
        return OrtSyncStream(factory.sync_stream(), self.ep_name)


EpSelectionDelegate = Callable[
    [Sequence[OrtEpDevice], Mapping[str, str], Mapping[str, str], int], Sequence[OrtEpDevice]
]


@functools.cache
def _host_cpu() -> tuple[str, int]:
    """(vendor name, PCI vendor id) of this machine's CPU; ("", 0) where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return _CPU_VENDORS.get(line.split(":", 1)[1].strip(), ("", 0))
    except OSError:
        pass
    machine = platform.machine().lower()
    return ("ARM", 0x41) if machine in {"arm64", "aarch64"} else ("", 0)


def hardware_of(entry: DeviceEntry) -> OrtHardwareDevice:
    """The hardware device a provider's probe entry runs on.

    A host entry (device type "cpu") is this machine's CPU. Other entries say their hardware
    in `DeviceEntry.hardware_type` ("cpu", "gpu" or "npu": an OpenCL device on PoCL is a CPU);
    an entry that says nothing is taken for a GPU, the usual accelerator.
    """
    if entry.device.type == "cpu":
        vendor, vendor_id = _host_cpu()
        kind = OrtHardwareDeviceType.CPU
    else:
        vendor, vendor_id = entry.vendor, entry.vendor_id
        kind = _HARDWARE_NAMES.get(
            (entry.hardware_type or "gpu").lower(), OrtHardwareDeviceType.GPU
        )
    return OrtHardwareDevice(
        type=kind,
        vendor_id=int(vendor_id),
        vendor=vendor or entry.vendor,
        device_id=entry.device.id,
        metadata={str(k): str(v) for k, v in entry.metadata.items()},
    )


def _ep_devices_of(
    factory: ProviderFactory, entries: Sequence[DeviceEntry], version: str
) -> list[OrtEpDevice]:
    from turnout.api.values import OrtMemoryInfo

    out = []
    for entry in entries:
        hw = hardware_of(entry)
        out.append(
            OrtEpDevice(
                ep_name=factory.name,
                ep_vendor=factory.vendor,
                ep_metadata={"version": version} if version else {},
                ep_options={str(k): str(v) for k, v in entry.default_options.items()},
                device=hw,
                memory_info=OrtMemoryInfo(
                    "Cpu" if entry.device.type == "cpu" else entry.device.type,
                    device_id=entry.device.id,
                    device_vendor_id=hw.vendor_id,
                ),
            )
        )
    return out


def get_ep_devices(include_unavailable: bool = False) -> list[OrtEpDevice]:
    """Every available provider's devices, providers by priority, the numpy CPU provider last.

    Unavailable providers list no devices, as in onnxruntime. With `include_unavailable`, each
    of them adds one entry whose `unavailable_reason` says why (the probe's reason: no CuPy, no
    driver, ...), so an application can tell a user what is missing; those entries are listed
    after the available ones and are never chosen for a session.
    """
    from turnout.sdk.plugins import registry

    found: list[OrtEpDevice] = []
    cpu: list[OrtEpDevice] = []
    missing: list[OrtEpDevice] = []
    for factory in sorted(registry.all(), key=lambda f: -f.default_priority):
        avail = registry.probe(factory)
        if not avail.ok:
            if include_unavailable:
                missing.append(_unavailable_ep_device(factory, avail.reason or "unavailable"))
            continue
        devices = _ep_devices_of(factory, avail.devices, avail.version or factory.version or "")
        (cpu if factory.name == CPU_PROVIDER else found).extend(devices)
    return found + cpu + missing


def _unavailable_ep_device(factory: ProviderFactory, reason: str) -> OrtEpDevice:
    """The entry standing for a provider that cannot run here: its declared device type, no
    vendor ids (nothing was found to read them from), and the reason."""
    kind = _HARDWARE_NAMES.get(factory.device_type.lower(), OrtHardwareDeviceType.GPU)
    return OrtEpDevice(
        ep_name=factory.name,
        ep_vendor=factory.vendor,
        ep_metadata={"version": factory.version} if factory.version else {},
        ep_options={},
        device=OrtHardwareDevice(type=kind, vendor_id=0, vendor="", device_id=0),
        unavailable_reason=reason,
    )


def specs_for_devices(
    devices: Sequence[OrtEpDevice], options: Mapping[str, Any]
) -> tuple[str, dict[str, str]]:
    """The provider spec `add_provider_for_devices` appends: one provider, on its device.

    All devices must belong to one provider, as in onnxruntime. A turnout provider instance
    runs on one device: given several, it runs on the first, and says so.
    """
    if not devices:
        raise InvalidArgument("add_provider_for_devices: no EP devices given")
    for d in devices:
        if not isinstance(d, OrtEpDevice):
            raise InvalidArgument(
                f"add_provider_for_devices: expected OrtEpDevice entries from get_ep_devices(), "
                f"got {type(d).__name__}"
            )
        if d.unavailable_reason is not None:
            raise InvalidArgument(
                f"add_provider_for_devices: {d.ep_name} cannot run here: {d.unavailable_reason}"
            )
    names = sorted({d.ep_name for d in devices})
    if len(names) > 1:
        raise InvalidArgument(
            f"add_provider_for_devices: all devices must belong to one execution provider, "
            f"got {', '.join(names)}"
        )
    if len(devices) > 1:
        warnings.warn(
            f"{names[0]}: a turnout provider runs on one device; using the first of the "
            f"{len(devices)} given (device id {devices[0].device.device_id})",
            UserWarning,
            stacklevel=3,
        )
    merged = {**devices[0].ep_options, **{str(k): str(v) for k, v in options.items()}}
    return names[0], merged


def model_metadata(model: Any) -> dict[str, str]:
    """What a selection delegate gets to know about the model (onnxruntime's keys), and its
    custom metadata."""
    out = {p.key: p.value for p in model.metadata_props}
    out.update(
        doc_string=model.doc_string,
        domain=model.domain,
        graph_description=model.graph.doc_string,
        graph_name=model.graph.name,
        model_version=str(model.model_version),
        producer_name=model.producer_name,
        producer_version=model.producer_version,
    )
    return out


def policy_provider_specs(
    policy: OrtExecutionProviderDevicePolicy | None,
    delegate: EpSelectionDelegate | None,
    model_metadata: Mapping[str, str],
) -> list[tuple[str, dict[str, str]]]:
    """The provider list a selection policy (or the application's delegate) picks, the CPU
    request last. The CPU request means the host: the numpy kernels and the host providers."""
    devices = get_ep_devices()
    if delegate is not None:
        chosen = _delegate_choice(delegate, devices, model_metadata)
    else:
        chosen = _policy_choice(OrtExecutionProviderDevicePolicy(policy or 0), devices)
    specs: list[tuple[str, dict[str, str]]] = []
    seen: set[str] = set()
    for name in dict.fromkeys(d.ep_name for d in chosen):
        if name == CPU_PROVIDER or name in seen:
            continue
        mine = [d for d in chosen if d.ep_name == name]
        specs.append((name, dict(mine[0].ep_options)))
        seen.add(name)
    return [*specs, (CPU_PROVIDER, {})]


def _policy_choice(
    policy: OrtExecutionProviderDevicePolicy, devices: Sequence[OrtEpDevice]
) -> list[OrtEpDevice]:
    """The first device of the preferred hardware type (providers come by priority); none
    when that type is absent, which leaves the CPU request alone. A CPU preference is the
    CPU request itself: the host providers serve it."""
    want = _PREFERRED[policy]
    if want == OrtHardwareDeviceType.CPU:
        return []
    return [d for d in devices if d.device.type == want][:1]


def _delegate_choice(
    delegate: EpSelectionDelegate,
    devices: Sequence[OrtEpDevice],
    model_metadata: Mapping[str, str],
) -> list[OrtEpDevice]:
    """Call the application's delegate with onnxruntime's arguments and check its answer."""
    try:
        chosen = list(delegate(list(devices), dict(model_metadata), {}, len(devices)))
    except Exception as e:
        raise Fail(f"EP selection delegate raised {type(e).__name__}: {e}") from e
    if not chosen:
        raise Fail("EP selection delegate did not select anything")
    if len(chosen) > len(devices):
        raise Fail(f"EP selection delegate selected {len(chosen)} devices; at most {len(devices)}")
    for d in chosen:
        if d not in devices:
            raise Fail(
                f"EP selection delegate returned {d!r}, which is not one of the OrtEpDevice "
                "entries it was given"
            )
    return chosen
