"""`Step`, one prepared node of a plan: what the plan compiles, the copy insertion rewrites and
the memory accounting replays, so it sits below all three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnout.sdk.provider import KernelFn

__all__ = ["Step"]


@dataclass(frozen=True)
class Step:
    """One node ready to run: its kernel function and the value names it reads and writes.
    `free`: the provider allocator's `free`, called on each output once it is dead, when that
    allocator pools (None otherwise)."""

    name: str
    op_type: str
    provider: str
    fn: KernelFn
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    free: Callable[[Any], None] | None = None
