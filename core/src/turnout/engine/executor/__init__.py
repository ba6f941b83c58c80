"""Plan and execute: flat step lists compiled into straight-line functions."""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule
from turnout.engine.executor.plan import Plan, RunTerminated, Step

__all__ = ["Plan", "RunTerminated", "Step"]


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
