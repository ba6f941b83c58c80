"""`onnxruntime.capi._pybind_state`: the same names as `onnxruntime_pybind11_state` (onnxruntime
imports its native module here), so `import onnxruntime.capi._pybind_state as C` works."""

from __future__ import annotations

from turnout.api.capi import onnxruntime_pybind11_state as _native
from turnout.api.capi.onnxruntime_pybind11_state import *  # noqa: F403 - onnxruntime re-exports them all here

__all__ = list(_native.__all__)
