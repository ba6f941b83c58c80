"""`onnxruntime.capi._pybind_state`: value classes, exceptions and module-level functions.

The session-level functions import `turnout.session` only when called, so importing this module
stays cheap and free of import cycles.
"""

from __future__ import annotations

from typing import Any

from .. import logs
from ..values import (
    OrtAllocatorType,
    OrtDevice,
    OrtMemoryInfo,
    OrtMemType,
    OrtValue,
    SparseTensor,
)
from . import onnxruntime_pybind11_state as _exceptions
from .onnxruntime_pybind11_state import *  # noqa: F403 - onnxruntime's exception classes

__all__ = [
    "OrtAllocatorType",
    "OrtDevice",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtValue",
    "SparseTensor",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_device",
    "get_version_string",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
]
__all__ += _exceptions.__all__  # the exception names stay importable from here, as in ORT


def set_default_logger_severity(level: int) -> None:
    """ORT severity: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal."""
    logs.set_severity(level)


def set_default_logger_verbosity(level: int) -> None:
    logs.set_verbosity(level)


def get_available_providers() -> Any:
    from ..session import get_available_providers as f

    return f()


def get_all_providers() -> Any:
    from ..session import get_all_providers as f

    return f()


def get_device() -> Any:
    from ..session import get_device as f

    return f()


def get_version_string() -> Any:
    from ..session import get_version_string as f

    return f()


def get_build_info() -> Any:
    from ..session import get_build_info as f

    return f()
