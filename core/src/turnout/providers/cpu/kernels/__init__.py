"""CPU kernels, one module per op family; importing this package registers them all.

Modules register themselves with `@cpu_kernel`; this file imports every module in the package so
that adding a family is adding a file, not editing a list.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from turnout._submodules import submodule


def load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")


load_all()


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
