"""`turnout.api.backend`, also `onnxruntime.backend`: onnx's backend API over turnout."""

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
