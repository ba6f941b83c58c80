"""Built-in providers. Only the CPU provider lives in core; the others are plugins."""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
