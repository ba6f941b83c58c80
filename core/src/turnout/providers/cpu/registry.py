"""The CPU provider's kernel registry and the decorator every CPU kernel module uses.

from turnout.providers.cpu.registry import cpu_kernel

@cpu_kernel("Relu", since=6)
def relu(node: KernelNode) -> KernelFn:
    return lambda x: (np.maximum(x, x.dtype.type(0)),)

Kernel modules load on first use: a lookup imports the modules that `kernel_index.py` names for
the op type (importing all 34 took 20-30 ms of every fresh process's first session; an mlp needs
3 of them). `tests/core/test_cpu_kernel_index.py` keeps the index equal to what importing
every module registers; `turnout.providers.cpu.kernels.write_index()` rewrites it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from turnout.sdk.ep.kernels import AnyFactory, KernelDef, KernelRegistry

__all__ = ["CPU_KERNELS", "LazyKernelRegistry", "cpu_kernel"]

KERNELS_PACKAGE = "turnout.providers.cpu.kernels"


class LazyKernelRegistry(KernelRegistry):
    """A registry whose kernel modules are imported the first time one of their ops is looked
    up; the op list comes from the index, so listing ops imports nothing."""

    def __init__(self, provider_name: str, package: str) -> None:
        super().__init__(provider_name)
        self.package = package
        self._loaded: set[tuple[str, str]] = set()
        self._origins: dict[tuple[str, str], set[str]] = {}

    def register(
        self, op_type: str, since: int = 1, *, domain: str = "", **kw: Any
    ) -> Callable[[AnyFactory], AnyFactory]:
        """`KernelRegistry.register`, noting the module that registers (the caller's: a module
        may register a factory defined in another, as contrib_normalization does)."""
        caller = sys._getframe(1).f_globals.get("__name__", "")
        self._origins.setdefault((domain, op_type), set()).add(caller)
        return super().register(op_type, since, domain=domain, **kw)

    def origins(self, domain: str, op_type: str) -> list[str]:
        """The modules that registered kernels for (domain, op_type) so far."""
        return sorted(self._origins.get((domain, op_type), ()))

    def _index(self) -> dict[tuple[str, str], tuple[str, ...]]:
        from turnout.providers.cpu.kernel_index import KERNEL_MODULES

        return KERNEL_MODULES

    def load(self, domain: str, op_type: str) -> None:
        """Import the modules that register kernels for (domain, op_type), once."""
        key = (domain, op_type)
        if key in self._loaded:
            return
        for module in self._index().get(key, ()):
            importlib.import_module(f"{self.package}.{module}")
        self._loaded.add(key)

    def ops(self) -> list[tuple[str, str]]:
        """(domain, op_type) pairs that have at least one kernel, loaded or not."""
        return sorted(set(self._index()) | set(super().ops()))

    def registered(self) -> list[tuple[str, str]]:
        """(domain, op_type) pairs of the modules imported so far."""
        return super().ops()

    def defs(self, domain: str, op_type: str) -> list[KernelDef]:
        """The kernels registered so far for (domain, op_type), by since-version."""
        return list(self._defs.get((domain, op_type), ()))

    def lookup(self, domain: str, op_type: str, since_version: int) -> KernelDef | None:
        self.load(domain, op_type)
        return super().lookup(domain, op_type, since_version)


CPU_KERNELS = LazyKernelRegistry("CPUExecutionProvider", KERNELS_PACKAGE)
cpu_kernel = CPU_KERNELS.register
