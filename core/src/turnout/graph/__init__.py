"""The graph layer: an ONNX model as turnout reads it.

Loading and structure checks, validation, shape inference, the IR that partitioning and
execution share, tensors and dtypes, sparse tensors, resource limits, the contrib op schemas, the
error types and the logger. It imports nothing else of turnout: every other layer builds on it.
"""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
