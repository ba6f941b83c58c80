"""The `turnout` entry point of turnout-numba: contributes NumbaProviderFactory.

It imports nothing heavy: numba loads when the provider is probed or created, so a broken numba
installation shows up as the provider's unavailability reason, not as a broken plugin.
"""

from __future__ import annotations

from turnout import hookimpl
from turnout.sdk.provider import ProviderFactory

from .factory import NumbaProviderFactory


@hookimpl
def turnout_providers() -> list[ProviderFactory]:
    return [NumbaProviderFactory()]
