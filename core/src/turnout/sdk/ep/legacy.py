"""Contract 1, kept in one place so that providers written for it still load.

A contract-1 provider declares its own `name` and `device`, takes untyped `option_names`,
and compiles fused groups through `_compile(groups)`: each group a `Capability` with the
whole graph's `GraphView`, answered with `CompiledKernel`s. turnout calls `compile_v1` for a
provider that claims fused groups without declaring `compiles = True`. New providers
implement contract 2 (`ExecutionProvider.compile_subgraphs`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from turnout.graph.errors import EPFail

if TYPE_CHECKING:
    from turnout.graph.ir import GraphView
    from turnout.sdk.ep.capability import Capability, CompiledKernel
    from turnout.sdk.ep.provider import ExecutionProvider

__all__ = ["compile_v1"]


def compile_v1(
    provider: ExecutionProvider, groups: Sequence[tuple[Capability, GraphView]]
) -> list[CompiledKernel]:
    """Compile `groups` through the provider's contract-1 `_compile`, with a deprecation
    warning; a compiler error names the provider."""
    if not groups:
        return []
    compile_groups = getattr(provider, "_compile", None)
    if compile_groups is None:
        raise EPFail(
            f"{provider.name} claimed fused groups but neither declares compiles = True "
            "(compile_subgraphs) nor implements the contract-1 _compile"
        )
    warnings.warn(
        f"{provider.name} compiles through the deprecated contract-1 _compile(groups); "
        "declare compiles = True and implement fused_groups and compile_subgraphs instead",
        DeprecationWarning,
        stacklevel=2,
    )
    try:
        return list(compile_groups(groups))
    except EPFail:
        raise
    except Exception as e:  # a compiler bug must name the provider
        raise EPFail(f"{provider.name}: compile failed: {e}") from e
