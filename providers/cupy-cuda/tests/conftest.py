"""Fixtures for turnout-cupy's tests: the emulated provider registered for a test, and markers.

Tests are tiered by what they need (STYLE.md): pure CPU tests always run; the compile tests need
nvcc or NVRTC; GPU tests skip with the probe's reason on machines without a usable GPU.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from turnout.plugins import registry
from turnout_cupy.emulated import EMULATED_NAME, EmulatedFactory
from turnout_cupy.factory import CuPyProviderFactory


@pytest.fixture
def emulated() -> Iterator[str]:
    """The emulated provider's name, registered for one test (numpy backend: no CUDA)."""
    registry.register(EmulatedFactory())
    try:
        yield EMULATED_NAME
    finally:
        registry.unregister(EMULATED_NAME)


def gpu_reason() -> str | None:
    """None when a CUDA device is usable here, else the probe's reason."""
    avail = CuPyProviderFactory().probe()
    return None if avail.ok else avail.reason


requires_gpu = pytest.mark.skipif(
    gpu_reason() is not None, reason=f"needs an NVIDIA GPU: {gpu_reason()}"
)
