"""Submodules on attribute access: `turnout.sdk.plugins` works after a bare `import turnout`.

`import turnout` imports none of its packages' modules (issue 27), where it used to import
most of them; code written for that (`import turnout` then `turnout.sdk.provider.X`) reads
submodules as attributes. Each package's `__getattr__` imports them then.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["submodule"]


def submodule(package: str, name: str) -> ModuleType:
    """`package.name`, imported now; AttributeError when there is no such submodule."""
    if name.startswith("__"):  # dunder probes (copy, pickle, inspect) import nothing
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{package}.{name}":
            raise  # the submodule exists and failed to import something: say what
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
