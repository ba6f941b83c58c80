"""turnout-opencl: an execution provider running OpenCL C kernels through pyopencl.

The parts, named as in every turnout provider: `OpenCLProviderFactory` (probe, create),
`OpenCLExecutionProvider` (capability, compile), `OpenCLAllocator`, `OpenCLDataTransfer`,
kernels in `kernels/` (OpenCL C generated from tables), fused elementwise groups in `fusion`.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
