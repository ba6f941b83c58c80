"""`turnout.api.backend`, also `onnxruntime.backend`: onnx's backend API over turnout."""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule
from turnout.api.backend import backend, backend_rep
from turnout.api.backend.backend import (
    OnnxRuntimeBackend,
    OnnxRuntimeBackendRep,
    TurnoutBackend,
    TurnoutBackendRep,
    is_compatible,
    prepare,
    run,
    run_model,
    supports_device,
)

__all__ = [
    "OnnxRuntimeBackend",
    "OnnxRuntimeBackendRep",
    "TurnoutBackend",
    "TurnoutBackendRep",
    "backend",
    "backend_rep",
    "is_compatible",
    "prepare",
    "run",
    "run_model",
    "supports_device",
]


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
