"""turnout-numba: the NumbaExecutionProvider (alias "numba") for turnout.

Compiled CPU kernels (numba) for elementwise, reduction, normalization and index ops, fused
elementwise groups compiled into one kernel each, and turnout's numpy kernels for the rest.
"""

from __future__ import annotations

import os

# numba's OpenMP workers spin after every parallel loop by default, holding the cores that
# BLAS's threads need for the next GEMM (mlp at 2 threads on 2 cores: 16 ms spinning, 3.2 ms
# passive). Set before numba loads its OpenMP runtime (the first parallel launch); a value the
# user set wins. Documented in the README.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

__all__ = ["NumbaProviderFactory", "__version__"]


def __getattr__(name: str) -> object:
    if name == "NumbaProviderFactory":
        from .factory import NumbaProviderFactory

        return NumbaProviderFactory
    raise AttributeError(name)
