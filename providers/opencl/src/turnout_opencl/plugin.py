"""The `turnout` entry point of turnout-opencl: contributes OpenCLProviderFactory.

It imports nothing heavy: pyopencl loads when the provider is probed or created, so a missing
OpenCL runtime shows up as the provider's unavailability reason, not as a broken plugin.
"""

from __future__ import annotations

from turnout import hookimpl
from turnout.sdk.provider import ProviderFactory

from .factory import OpenCLProviderFactory

__all__ = ["turnout_providers"]


@hookimpl
def turnout_providers() -> list[ProviderFactory]:
    return [OpenCLProviderFactory()]
