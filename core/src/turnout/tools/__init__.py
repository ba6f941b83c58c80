"""Tools on top of the runtime: the command line, quantization, Ray batch inference, provider
scaffolding, test helpers (`turnout.testing`), benchmark models and the fake device.

Nothing in the runtime layers imports this package.
"""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
