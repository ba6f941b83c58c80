"""The emulated backend as a provider factory: for tests and the compile-only check, never
registered by the plugin and never what a user gets.

`EmulatedFactory` makes a `CuPyExecutionProvider` whose backend is numpy: the same capability
decisions, kernels, fusion and CUDA source generation as on a GPU, with numpy doing the
arithmetic. A pass here checks kernel logic, not CUDA: nothing runs on a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.sdk.provider import CONTRACT_VERSION, Availability, ExecutionProvider, ProviderFactory

from . import __version__
from .expected_failures import EXPECTED_FAILURES
from .factory import OPTIONS

__all__ = ["EMULATED_FAILURES", "EMULATED_NAME", "EmulatedFactory"]

EMULATED_NAME = "CuPyEmulatedExecutionProvider"

EMULATED_FAILURES: dict[str, str] = {
    **EXPECTED_FAILURES,  # the provider's reviewed list (Resize align_corners' expected data)
    "test_attention_4d_causal_fp16": (
        "emulated only: numpy's float16 matmul rounds differently from the expected data's "
        "steps; 2 of 192 outputs differ by one float16 ulp at rtol 1e-3"
    ),
}
"""Node cases the emulated provider is known to fail, with why (not a claim about the GPU)."""


class EmulatedFactory(ProviderFactory):
    name = EMULATED_NAME
    options = OPTIONS
    version = __version__
    contract_version = CONTRACT_VERSION

    def __init__(self) -> None:
        self.created: list[ExecutionProvider] = []
        """Every provider this factory made (the compile-only check reads what they
        generated)."""

    def _probe(self) -> Availability:
        return Availability(True, version=f"{__version__} (emulated on numpy: no CUDA)")

    def expected_failures(self) -> Mapping[str, str]:
        return EMULATED_FAILURES

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        from .backend import emulated_backend
        from .provider import CuPyExecutionProvider

        provider = CuPyExecutionProvider(options, self, emulated_backend())
        self.created.append(provider)
        return provider
