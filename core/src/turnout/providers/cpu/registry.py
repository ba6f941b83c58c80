"""The CPU provider's kernel registry and the decorator every CPU kernel module uses.

from turnout.providers.cpu.registry import cpu_kernel

@cpu_kernel("Relu", since=6)
def relu(node: KernelNode) -> KernelFn:
    return lambda x: (np.maximum(x, x.dtype.type(0)),)
"""

from __future__ import annotations

from ...provider import KernelNode, KernelRegistry

__all__ = ["CPU_KERNELS", "constant_input", "cpu_kernel"]

CPU_KERNELS = KernelRegistry("CPUExecutionProvider")
cpu_kernel = CPU_KERNELS.register


def constant_input(node: KernelNode, index: int) -> bool:
    """Whether input `index` is an initializer of the node's graph that no feed can replace.

    The plan then hands the kernel the same read-only array on every run (a session's
    initializer override is fixed when the plan is built), so a kernel may keep what it
    derives from that array (a transposed weight, checked indices) keyed by its identity.
    """
    inputs = node.node.inputs
    if index >= len(inputs) or not inputs[index]:
        return False
    name = inputs[index]
    graph = node.node.graph
    return name in graph.initializers and all(i.name != name for i in graph.inputs)
