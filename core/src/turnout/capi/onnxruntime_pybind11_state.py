"""`onnxruntime.capi.onnxruntime_pybind11_state`: onnxruntime's exception classes, same names."""

from __future__ import annotations

from ..errors import (
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoaded,
    NoModel,
    NoSuchFile,
    NotImplemented,
    RuntimeException,
)

__all__ = [
    "EPFail",
    "EngineError",
    "Fail",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "ModelLoaded",
    "NoModel",
    "NoSuchFile",
    "NotImplemented",
    "RuntimeException",
]
