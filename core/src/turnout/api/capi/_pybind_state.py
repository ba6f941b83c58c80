"""`onnxruntime.capi._pybind_state`: the same names as `onnxruntime_pybind11_state` (onnxruntime
imports its native module here), so `import onnxruntime.capi._pybind_state as C` works."""

from __future__ import annotations

from typing import Any

from turnout.api.capi import onnxruntime_pybind11_state as _native
from turnout.api.capi.onnxruntime_pybind11_state import *  # noqa: F403 - onnxruntime re-exports them all here

__all__ = list(_native.__all__)


def __getattr__(name: str) -> Any:
    """Names the native module resolves on first read (the weight-packing helpers)."""
    try:
        return getattr(_native, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
