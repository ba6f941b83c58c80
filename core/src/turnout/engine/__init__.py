"""The engine: from a loaded graph to results.

Provider selection, partitioning, the execution plan and executor, copies at device boundaries,
memory planning, profiling and the pipeline's stages. Each stage takes plain arguments (an
`EngineOptions` record), never the onnxruntime façade's objects. It imports the graph layer, the
SDK, the optimizer and the built-in CPU provider.
"""

from __future__ import annotations

from types import ModuleType

from turnout._submodules import submodule


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
