"""The CPU provider's kernel registry and the decorator every CPU kernel module uses.

from turnout.providers.cpu.registry import cpu_kernel

@cpu_kernel("Relu", since=6)
def relu(node: KernelNode) -> KernelFn:
    return lambda x: (np.maximum(x, x.dtype.type(0)),)
"""

from __future__ import annotations

from turnout.sdk.provider import KernelRegistry

__all__ = ["CPU_KERNELS", "cpu_kernel"]

CPU_KERNELS = KernelRegistry("CPUExecutionProvider")
cpu_kernel = CPU_KERNELS.register
