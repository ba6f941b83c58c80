"""ExampleFactory: whether the provider can run here, and one provider per session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.sdk.ep import (
    CONTRACT_VERSION,
    Allocator,
    Availability,
    DataTransfer,
    Device,
    DeviceEntry,
    ProviderFactory,
    ProviderOption,
)

from . import ALIAS, PROVIDER_NAME, __version__
from .allocator import ExampleAllocator
from .data_transfer import ExampleDataTransfer
from .expected_failures import EXPECTED_FAILURES
from .provider import ExampleProvider

__all__ = ["OPTIONS", "ExampleFactory"]

OPTIONS = (
    ProviderOption("fuse", (bool,), True, "Run chains of elementwise ops as one fused kernel."),
)
"""Typed provider options: `providers=[("example", {"fuse": False})]` (or "0") overrides the
default. turnout rejects unknown keys and values of the wrong type, naming them, and shows the
table with `turnout providers --options example`."""


class ExampleFactory(ProviderFactory):
    name = PROVIDER_NAME
    aliases = (ALIAS,)
    default_priority = 0  # order when the user passes no provider list (higher first; CPU -1000)
    options = OPTIONS  # parsed and filled with defaults before _create sees them
    version = __version__
    contract_version = CONTRACT_VERSION  # the provider contract this package is written for
    device_type = "cpu"  # where its values live: the one device declaration (see _create)

    def _probe(self) -> Availability:
        # A real accelerator checks its driver, library and devices here, and when it cannot run
        # returns Availability(False, reason="...") with the exact reason users will see.
        entry = DeviceEntry(self.device(), {"backend": "numpy"}, self.default_options())
        return Availability(True, (entry,), version=__version__)

    def _create(self, options: dict[str, Any]) -> ExampleProvider:
        # The provider takes its name, device, allocator and transfer from this factory, so
        # none of them is declared twice.
        return ExampleProvider(options, self)

    def create_allocator(self, device: Device) -> Allocator:
        # Per device, independent of any session (onnxruntime's plugin factories do the
        # same); required when device_type is not "cpu".
        return ExampleAllocator(device)

    def create_data_transfer(self, device: Device) -> DataTransfer:
        return ExampleDataTransfer(device)

    def expected_failures(self) -> Mapping[str, str]:
        """The reviewed list of conformance cases this provider is known to fail."""
        return EXPECTED_FAILURES
