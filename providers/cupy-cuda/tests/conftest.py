"""Fixtures for turnout-cupy's tests: the emulated provider registered for a test, and markers.

Tests are tiered by what they need (STYLE.md): pure CPU tests always run; the compile tests need
nvcc or NVRTC; GPU tests skip with the probe's reason on machines without a usable GPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from turnout.sdk.plugins import registry
from turnout.tools.testing import (
    assert_outputs_close,
    cpu_session,
    one_node_model,
    provider_session,
    run_reference,
)
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


class NodeCheck:
    """One node on the emulated provider next to a reference: onnx.reference
    (`against_reference`) or turnout's numpy CPU kernels (`against_cpu`)."""

    def __init__(self, provider: str) -> None:
        self.provider = provider

    def session(self, node: Any, feeds: dict[str, Any], opsets: Any) -> Any:
        """The one-node model's session on the emulated provider (fallback "error")."""
        model = one_node_model(node, list(feeds.values()), opsets)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # onnx's deprecation warnings for old opsets
            return provider_session(model, self.provider)

    def against_reference(self, node: Any, feeds: dict[str, Any], opsets: Any, tol: float) -> None:
        got = self.session(node, feeds, opsets).run(None, feeds)
        assert_outputs_close(run_reference(node, list(feeds.values()), opsets), got, tol, tol)

    def against_cpu(self, model: Any, feeds: dict[str, Any], tol: float) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = provider_session(model, self.provider).run(None, feeds)
            want = cpu_session(model).run(None, feeds)
        assert len(got) == len(want)
        assert_outputs_close(want, got, tol, tol)


@pytest.fixture
def node_check(emulated: str) -> NodeCheck:
    """`NodeCheck` on the emulated provider, registered for one test."""
    return NodeCheck(emulated)
