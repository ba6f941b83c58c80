"""ProviderFactory: what a plugin registers; one per process, one provider per session.

Required: `name` and `_create(options)`. A contract-2 factory whose `device_type` is not the
host also implements `create_allocator` and `create_data_transfer`, per device and independent
of any session, as onnxruntime's plugin EP factories do. A factory missing a required method
cannot be instantiated (abstract methods), and one whose name or device methods are missing
fails when its class is defined, naming what is missing.

A factory of a contract version this turnout does not support, or a plugin whose hook name is
misspelt, is listed with the reason by `turnout providers` (and `broken_plugins()`) and not
loaded; the other plugins load.

turnout, not the factory, parses the options a session passes (each typed `ProviderOption`
checked and defaulted) and holds the provider to the factory's device: see
`turnout.engine.provider_creation`.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from turnout.sdk.ep.device import CPU, Availability, Device, DeviceEntry
from turnout.sdk.ep.memory import Allocator, DataTransfer, Stream
from turnout.sdk.provider_options import ProviderOption

if TYPE_CHECKING:
    from turnout.sdk.ep.provider import ExecutionProvider

__all__ = ["CONTRACT_VERSION", "SUPPORTED_CONTRACTS", "ProviderFactory"]

CONTRACT_VERSION = 2
"""The provider contract of this turnout, and every factory's default. 2 added typed options
(`ProviderOption`), devices declared once (`ProviderFactory.device_type`, with their hardware
type in `probe()`), memory through the provider's allocator (`KernelContext.allocate`,
`Allocator.free`), optional streams and events, batched copies (`DataTransfer.copy_tensors`)
and fused groups compiled as subgraphs. A factory that declares `contract_version = 1` still
loads (`turnout.sdk.ep.legacy`)."""
SUPPORTED_CONTRACTS = frozenset({1, 2})

_DEVICE_METHODS = ("create_allocator", "create_data_transfer")


class ProviderFactory(ABC):
    """What a plugin registers: a name, aliases, priority, `probe()` and `_create(options)`."""

    name: str = "ExecutionProvider"
    aliases: tuple[str, ...] = ()
    default_priority: int = 0
    contract_version: int = CONTRACT_VERSION
    """The provider contract this factory implements. A version this turnout does not support
    keeps the provider from loading, with the reason in `turnout providers`."""
    options: tuple[ProviderOption, ...] = ()
    """Typed options (name, type, default, doc): turnout parses each given value and fills
    the defaults, so `_create` sees every declared option with a value of its type."""
    option_names: frozenset[str] = frozenset()
    """The keys a session may pass: the names of `options` (filled in from them)."""
    version: str | None = None
    vendor: str = ""
    """Who makes the provider (`OrtEpDevice.ep_vendor`)."""
    device_type: str = "cpu"
    """The `Device.type` its values live on; OrtValues for that device type use its transfer.
    The one declaration of the device: `device(i)` builds the provider's, its allocator's, its
    transfer's and its probe entries' `Device` from it."""
    serves_cpu_requests: bool = False
    """A host provider: when a session asks for `CPUExecutionProvider` (by name, by default, or
    as the implicit fallback), turnout places this provider ahead of the numpy kernels, so that
    applications which hardcode the CPU provider get the fastest host kernels. The session
    passes it `intra_op_num_threads` from `SessionOptions` when it takes that option."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "options" in cls.__dict__:
            cls.option_names = frozenset(cls.option_names) | {o.name for o in cls.options}
        if inspect.isabstract(cls):
            return
        if cls.name == ProviderFactory.name:
            raise TypeError(f"{cls.__qualname__} declares no name (the provider's name)")
        if cls.device_type != CPU.type and cls.contract_version >= 2:
            missing = [m for m in _DEVICE_METHODS if getattr(cls, m) is getattr(ProviderFactory, m)]
            if missing:
                raise TypeError(
                    f"{cls.__qualname__} declares device_type {cls.device_type!r} but does not "
                    f"implement {' and '.join(missing)}"
                )

    # -- required ----------------------------------------------------------------------------
    @abstractmethod
    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        """A provider for one session; `options` holds every declared option, parsed."""

    # -- availability ------------------------------------------------------------------------
    def probe(self) -> Availability:
        """Whether this provider can run here; never raises (a failure is a reason)."""
        try:
            return self._probe()
        except Exception as e:
            return Availability(False, reason=f"probe failed: {type(e).__name__}: {e}")

    def _probe(self) -> Availability:
        """The default: available on the host. A device provider checks its driver, library
        and devices here, and returns `Availability(False, reason=...)` when it cannot run."""
        return Availability(True, (DeviceEntry(CPU),), version=self.version)

    def device(self, device_id: int = 0) -> Device:
        """Device `device_id` of this factory's `device_type`, for probe entries and providers."""
        return Device(self.device_type, device_id)

    # -- options -----------------------------------------------------------------------------
    def default_options(self) -> dict[str, Any]:
        """Every typed option's default (what a probe's `DeviceEntry` lists)."""
        return {o.name: o.default for o in self.options}

    def option(self, name: str) -> ProviderOption | None:
        """The typed declaration of option `name`, if the factory declares one."""
        return next((o for o in self.options if o.name == name), None)

    # -- memory and transfer, per device -----------------------------------------------------
    def create_allocator(self, device: Device) -> Allocator:
        """The allocator of `device` (host memory by default); required for a device type
        other than the host."""
        return Allocator(device)

    def create_data_transfer(self, device: Device) -> DataTransfer:
        """The host <-> device copies of `device` (none needed on the host by default);
        required for a device type other than the host."""
        return DataTransfer(device)

    def data_transfer(self) -> DataTransfer:
        """Copies outside a session (OrtValue creation, IO binding): device 0's transfer,
        made once (`create_data_transfer`) and kept, so every OrtValue shares it."""
        made: DataTransfer | None = getattr(self, "_outside_transfer", None)
        if made is None:
            made = self._outside_transfer = self.create_data_transfer(self.device())
        return made

    def sync_stream(self) -> Stream | None:
        """A stream to enqueue `data_transfer()`'s copies on outside a session
        (`OrtEpDevice.create_sync_stream()`), or None for a provider without streams."""
        return None

    # -- conformance -------------------------------------------------------------------------
    def expected_failures(self) -> Mapping[str, str]:
        """Conformance cases this provider is known to fail: case name or regex -> reason.

        A reviewed list shipped with the provider; the conformance runner fails on a listed
        case that passes (a stale entry), so the list only shrinks.
        """
        return {}
