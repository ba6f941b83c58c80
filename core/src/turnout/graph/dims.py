"""Dimensions as a value's type declares them.

Its own module so that the contrib op schemas (`turnout.graph.contrib`) read declared shapes
without importing the IR, which registers those schemas before a cached schema lookup.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Dim", "declared_shape"]

Dim = int | str | None
"""A dimension: its size, a symbolic name, or None when unknown."""


def declared_shape(tensor_type: Any) -> tuple[Dim, ...] | None:
    """The dims a (sparse) tensor type declares: ints, dim names, None for an unnamed dim;
    None when it declares no shape at all."""
    if not tensor_type.HasField("shape"):
        return None
    return tuple(
        d.dim_value
        if d.HasField("dim_value")
        else (d.dim_param if d.HasField("dim_param") else None)
        for d in tensor_type.shape.dim
    )
