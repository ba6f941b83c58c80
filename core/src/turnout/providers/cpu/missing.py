"""The stand-in kernel for a node of an operator domain nobody defines, loaded because the
session asked for it (session.turnout.allow_unknown_domains): the model loads, and the node
fails when (and only if) it runs, naming itself. The partition report marks such nodes."""

from __future__ import annotations

from typing import Any

from turnout.graph import errors
from turnout.sdk.provider import KernelFn, KernelNode

__all__ = ["MISSING_SOURCE", "missing_kernel"]

MISSING_SOURCE = "no kernel"


def missing_kernel(kn: KernelNode) -> KernelFn:
    """A kernel function that raises, naming the node, its op and its domain."""
    message = (
        f"node {kn.name!r} ({kn.domain}::{kn.op_type}) has no kernel: no installed provider "
        f"or plugin defines domain {kn.domain!r} (the model was loaded with "
        "session.turnout.allow_unknown_domains=1)"
    )

    def run(*inputs: Any) -> tuple[Any, ...]:
        raise errors.NotImplemented(message)

    return run
