"""Copies of a model without the bytes of its big initializers, for the checker and inference.

The loader (`model.py`) and the type checks (`validate.py`) both make them, so this sits below
both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnx import ModelProto, TensorProto

__all__ = ["copy_fields", "light_copy"]


def copy_fields(src: Any, dst: Any, skip: str) -> None:
    """Copy every set field of message `src` into the empty `dst`, except field `skip`."""
    for fd in src.DESCRIPTOR.fields:
        if fd.name == skip:
            continue
        value = getattr(src, fd.name)
        if fd.is_repeated:
            if len(value):
                getattr(dst, fd.name).extend(value)
        elif src.HasField(fd.name):
            if fd.message_type is not None:
                getattr(dst, fd.name).CopyFrom(value)
            else:
                setattr(dst, fd.name, value)


def light_copy(
    model: ModelProto, initializer: Callable[[TensorProto], TensorProto | None]
) -> ModelProto:
    """A copy of `model` whose top-level initializers are `initializer(t)` (None drops one).

    Everything else is copied as is; big tensors that `initializer` returns unchanged are
    copied too, so it should replace or drop those.
    """
    out = ModelProto()
    copy_fields(model, out, "graph")
    copy_fields(model.graph, out.graph, "initializer")
    kept = [t2 for t2 in (initializer(t) for t in model.graph.initializer) if t2 is not None]
    out.graph.initializer.extend(kept)
    return out
