"""The onnxruntime façade: the names an onnxruntime application uses.

Sessions, options, OrtValue and device values, IO binding, `capi/`, EP devices and selection
policies, compiled models, LoRA adapters, the `onnx.backend` Backend, datasets and
`as_onnxruntime`. It turns onnxruntime's API into engine calls and imports every layer below.
"""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
