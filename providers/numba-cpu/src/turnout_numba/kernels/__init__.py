"""numba kernels, one module per op family; importing this package registers them all."""

from __future__ import annotations

import importlib
import pkgutil


def load_all() -> None:
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")


load_all()
