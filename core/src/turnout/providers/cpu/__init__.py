"""The built-in CPUExecutionProvider (numpy): the last fallback for every standard op."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from turnout._submodules import submodule

if TYPE_CHECKING:
    from turnout.sdk.provider import KernelRegistry

__all__ = ["numpy_kernels"]


def numpy_kernels() -> KernelRegistry:
    """The CPU provider's numpy kernels (each kernel module loads on its ops' first lookup).

    A host provider that serves CPU requests (turnout-numba) claims through it the nodes it
    does not compile, and a kernel may build one of these for a case it leaves to numpy.
    Loaded on first call: importing this package stays cheap.
    """
    from turnout.providers.cpu.registry import CPU_KERNELS

    return CPU_KERNELS


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
