"""turnout-cupy: an execution provider for NVIDIA GPUs through CuPy.

The parts, named as in every turnout provider: `CuPyProviderFactory` (probe, create),
`CuPyExecutionProvider` (capability, compile), `CuPyAllocator`, `CuPyDataTransfer`, kernels in
`kernels/` (written against an array module `xp`, so one kernel body serves CuPy on the GPU and,
in tests only, numpy as an emulated backend), fused elementwise groups generated as CUDA C in
`codegen` and compiled by CuPy (`RawKernel`), and `check` (every generated source through nvcc,
no GPU needed).
"""

from __future__ import annotations

__version__ = "0.1.0"

PROVIDER_NAME = "CuPyExecutionProvider"
ALIASES = ("cupy", "CUDAExecutionProvider")

__all__ = ["ALIASES", "PROVIDER_NAME", "__version__"]
