"""ExampleFactory: whether the provider can run here, and one provider per session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.errors import InvalidArgument
from turnout.provider import Availability, DeviceEntry, ProviderFactory

from . import ALIAS, PROVIDER_NAME, __version__
from .allocator import DEVICE
from .expected_failures import EXPECTED_FAILURES
from .provider import ExampleProvider

__all__ = ["DEFAULT_OPTIONS", "ExampleFactory"]

DEFAULT_OPTIONS: dict[str, Any] = {"fuse": True}
"""Provider options and their defaults; `providers=[("example", {"fuse": False})]` overrides."""


class ExampleFactory(ProviderFactory):
    name = PROVIDER_NAME
    aliases = (ALIAS,)
    default_priority = 0  # order when the user passes no provider list (higher first; CPU -1000)
    option_names = frozenset(DEFAULT_OPTIONS)  # the base class rejects any other key
    version = __version__
    device_type = DEVICE.type  # where its values live (OrtValues of this type use its transfer)

    def _probe(self) -> Availability:
        # A real accelerator checks its driver, library and devices here, and when it cannot run
        # returns Availability(False, reason="...") with the exact reason users will see.
        entry = DeviceEntry(DEVICE, {"backend": "numpy"}, DEFAULT_OPTIONS)
        return Availability(True, (entry,), version=__version__)

    def _create(self, options: dict[str, Any]) -> ExampleProvider:
        opts = {**DEFAULT_OPTIONS, **options}
        return ExampleProvider({"fuse": _as_bool("fuse", opts["fuse"])})

    def expected_failures(self) -> Mapping[str, str]:
        """The reviewed list of conformance cases this provider is known to fail."""
        return EXPECTED_FAILURES


def _as_bool(key: str, value: Any) -> bool:
    """A boolean option, given as a bool or (like onnxruntime's string options) "1"/"0"."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true"):
        return True
    if text in ("0", "false"):
        return False
    raise InvalidArgument(f"{PROVIDER_NAME}: option {key!r} must be a boolean, not {value!r}")
