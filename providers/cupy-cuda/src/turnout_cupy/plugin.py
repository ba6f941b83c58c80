"""The `turnout` entry point of turnout-cupy: contributes CuPyProviderFactory.

It imports nothing heavy: CuPy loads when the provider is probed or created, so a missing CuPy,
driver or GPU shows up as the provider's unavailability reason, not as a broken plugin.
"""

from __future__ import annotations

from turnout import hookimpl
from turnout.sdk.provider import ProviderFactory

from .factory import CuPyProviderFactory

__all__ = ["turnout_providers"]


@hookimpl
def turnout_providers() -> list[ProviderFactory]:
    return [CuPyProviderFactory()]
