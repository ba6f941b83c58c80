"""turnout-numba: the NumbaExecutionProvider (alias "numba") for turnout.

Compiled CPU kernels (numba) for elementwise, reduction, normalization and index ops, fused
elementwise groups compiled into one kernel each, and turnout's numpy kernels for the rest.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["NumbaProviderFactory", "__version__"]


def __getattr__(name: str) -> object:
    if name == "NumbaProviderFactory":
        from .factory import NumbaProviderFactory

        return NumbaProviderFactory
    raise AttributeError(name)
