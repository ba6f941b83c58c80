"""The installed custom op sets (`turnout_custom_ops`): checked, stored and looked up.

Plugin discovery (`turnout.sdk.plugins`) installs what the hooks return here, and
`turnout.sdk.custom_ops`, the public module, answers from here after discovery has run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelDef, KernelNode, KernelRegistry

__all__ = ["CUSTOM_SOURCE", "CustomOpSet", "forget", "install", "installed_domains", "lookup"]

CUSTOM_SOURCE = "custom op"


@dataclass(frozen=True)
class CustomOpSet:
    domain: str
    kernels: KernelRegistry
    schemas: tuple[Any, ...] = ()  # turnout.graph.contrib.OpSpec, one per op
    version: int = 1


_SETS: dict[str, CustomOpSet] = {}
_LOCK = threading.Lock()


def install(contributed: Iterable[Any], source: str) -> list[CustomOpSet]:
    """Check and install what a `turnout_custom_ops` hook returned (`CustomOpSet`s, or the
    older `(domain, KernelRegistry)` pairs); `InvalidArgument` names `source` otherwise."""
    from turnout.graph.contrib import define, spec_of
    from turnout.graph.model import known_domain

    sets: list[CustomOpSet] = []
    for item in contributed:
        if isinstance(item, tuple) and len(item) == 2:
            item = CustomOpSet(str(item[0]), item[1])
        if not isinstance(item, CustomOpSet) or not isinstance(item.kernels, KernelRegistry):
            raise InvalidArgument(
                f"{source}: turnout_custom_ops must return CustomOpSet objects, got {item!r}"
            )
        if not item.domain or known_domain(item.domain):
            raise InvalidArgument(
                f"{source}: custom op domain {item.domain!r} is empty or one turnout defines"
            )
        for spec in item.schemas:
            if getattr(spec, "domain", None) != item.domain:
                raise InvalidArgument(
                    f"{source}: schema {getattr(spec, 'name', spec)!r} is not in domain "
                    f"{item.domain!r}"
                )
        sets.append(item)
    with _LOCK:
        for s in sets:
            for spec in s.schemas:
                if spec_of(spec.domain, spec.name) is None:
                    define(spec)
            _SETS[s.domain] = s
    return sets


def lookup(node: KernelNode) -> KernelDef | str | None:
    """The plugin kernel for `node`; the reason none runs it when its domain is a plugin's;
    None for other domains."""
    found = _SETS.get(node.domain)
    if found is None:
        return None
    kernel = found.kernels.lookup(node.domain, node.op_type, node.since_version)
    if kernel is None:
        return (
            f"{node.domain}::{node.op_type}: the plugin that brings domain {node.domain!r} has "
            f"no kernel for it (its ops: {', '.join(op for _, op in found.kernels.ops())})"
        )
    return kernel


def forget(domain: str) -> None:
    """Remove an installed op set (tests); its schemas stay registered with onnx."""
    with _LOCK:
        _SETS.pop(domain, None)


def installed_domains() -> frozenset[str]:
    """The domains of the op sets installed so far."""
    return frozenset(_SETS)
