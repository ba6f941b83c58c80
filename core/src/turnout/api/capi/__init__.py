"""`onnxruntime.capi`: the module paths of onnxruntime's Python API, so imports written for
onnxruntime resolve in turnout."""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule
from turnout.api.capi import (
    build_and_package_info,
    onnxruntime_inference_collection,
    onnxruntime_pybind11_state,
    onnxruntime_validation,
)

__all__ = [
    "build_and_package_info",
    "onnxruntime_inference_collection",
    "onnxruntime_pybind11_state",
    "onnxruntime_validation",
]


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
