"""ExampleFactory: whether the provider can run here, and one provider per session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.sdk.provider import CONTRACT_VERSION, Availability, DeviceEntry, ProviderFactory
from turnout.sdk.provider_options import ProviderOption

from . import ALIAS, PROVIDER_NAME, __version__
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
        # The provider takes its name and device from this factory (and passes the device on
        # to its allocator and transfer), so neither is declared twice.
        return ExampleProvider(options, self)

    def expected_failures(self) -> Mapping[str, str]:
        """The reviewed list of conformance cases this provider is known to fail."""
        return EXPECTED_FAILURES
