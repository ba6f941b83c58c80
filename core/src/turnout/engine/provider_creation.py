"""Making a session's provider from its factory: option parsing and the device rules.

This is the engine's side of the provider contract. A factory only declares its options and
device type and builds a provider from parsed options (`_create`); here every given option is
checked against the declaration (unknown keys and bad values are an `InvalidArgument` naming
them), defaults are filled in, and the provider and its memory are held to the factory's
device type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.graph.errors import EPFail, InvalidArgument
from turnout.sdk.provider import CPU, ExecutionProvider, ProviderFactory

__all__ = ["create_provider", "parse_options"]


def create_provider(
    factory: ProviderFactory, options: Mapping[str, Any] | None = None
) -> ExecutionProvider:
    """A provider for one session, from `factory` and the options the session passes."""
    given = {str(k): v for k, v in (options or {}).items()}
    typed = parse_options(factory, given)
    provider = factory._create(typed)
    provider.requested_options = {k: typed[k] for k in given}
    if provider.name == ExecutionProvider.name:
        provider.name = provider.kernels.provider_name = factory.name
    if factory.contract_version >= 2:
        check_devices(factory, provider)
    return provider


def parse_options(factory: ProviderFactory, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every declared option: its default, or the given value parsed to its type."""
    unknown = sorted(set(given) - set(factory.option_names))
    if unknown:
        valid = ", ".join(sorted(factory.option_names)) or "(none)"
        raise InvalidArgument(
            f"{factory.name}: unknown provider option(s) {', '.join(unknown)}; valid: {valid}"
        )
    typed = factory.default_options()
    for key, raw in given.items():
        declared = factory.option(key)
        typed[key] = declared.parse(factory.name, raw) if declared is not None else raw
    return typed


def check_devices(factory: ProviderFactory, provider: ExecutionProvider) -> None:
    """A contract-2 provider, its allocator and its transfer live on the factory's device
    type; a part that declares no device of its own takes the provider's."""
    parts: dict[str, Any] = {
        "provider": provider,
        "allocator": provider.allocator,
        "data transfer": provider.data_transfer,
    }
    for what, part in parts.items():
        if part is not provider and part.device == CPU and "device" not in vars(part):
            part.device = provider.device
        if part.device.type != factory.device_type:
            raise EPFail(
                f"{factory.name}: its {what} is on {part.device}, but the factory declares "
                f"device_type {factory.device_type!r}; build them from the factory "
                "(ExecutionProvider(options, factory))"
            )
