"""The provider SDK: the contract a provider implements, and what providers share.

Factories, providers, kernels, capabilities, allocators, transfers, streams, provider options,
the pluggy hooks and plugin discovery, custom ops, devices, the fusion group finder, BLAS thread
control and the op semantics every provider reads (`turnout.sdk.semantics`). It imports only
the graph layer; the built-in CPU provider and third-party providers build on it.
"""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
