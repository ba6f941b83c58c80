"""The built-in CPU provider's plugin: it contributes `CPUProviderFactory` through the same
`turnout_providers` hook as every installed provider.

Plugin discovery (`turnout.sdk.plugins`) registers this module first, by name, as pytest
registers its internal plugins, so the SDK does not import the provider it is the contract of.
"""

from __future__ import annotations

from turnout.providers.cpu.provider import CPUProviderFactory
from turnout.sdk.hookspecs import hookimpl
from turnout.sdk.provider import ProviderFactory


@hookimpl
def turnout_providers() -> list[ProviderFactory]:
    return [CPUProviderFactory()]
