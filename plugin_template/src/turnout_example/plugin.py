"""The plugin module named by the `turnout` entry point: hook implementations only."""

from __future__ import annotations

import turnout

from .factory import ExampleFactory

__all__ = ["turnout_providers"]


@turnout.hookimpl
def turnout_providers() -> list[ExampleFactory]:
    """Contribute this package's provider factory (called once per process)."""
    return [ExampleFactory()]
