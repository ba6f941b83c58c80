"""`onnxruntime.capi.onnxruntime_inference_collection`: the session and value classes.

Names resolve on first access (module `__getattr__`), so this module does not import the session
machinery until it is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "InferenceSession": "turnout.session",
    "SessionOptions": "turnout.options",
    "RunOptions": "turnout.options",
    "IOBinding": "turnout.io_binding",
    "NodeArg": "turnout.session",
    "OrtValue": "turnout.values",
    "OrtDevice": "turnout.values",
    "SparseTensor": "turnout.values",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted(_HOMES)
