"""One module per group of contrib ops; each calls `turnout.graph.contrib.define` for its ops.

Every module in this package is imported when `turnout.graph.contrib` is.
"""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
