"""Dependencies whose import is deferred until a value of theirs is first read.

`ml_dtypes` (bfloat16, float8, int4, ...) takes 0.35-0.45 s to import with ml_dtypes 0.7 and
numpy 2.4 (its extension registers thousands of ufunc loops, each a linear search in numpy), and
`import onnx` imports it through `onnx._mapping`, although models with those element types are
rare. `install()` registers both as deferred modules before anything imports onnx: the import
statements bind them at once, and the real module runs, in place, when one of its attributes is
first read (by turnout's dtype tables, an exotic cast, onnx's helpers, or the application).

`import onnx` also imports, for its namespace, submodules that a session never uses: `compose`,
`utils` (tarfile), `gen_proto` (argparse, subprocess), `printer`, `parser` and
`version_converter`; deferred the same way, they cost nothing until read (`onnx.compose.
merge_models`, `from onnx.utils import extract_model`): 6-8 ms of a fresh process's first
session. `onnx.serialization` is not deferred: every `onnx.shape_inference` call reads it.

Unlike `importlib.util.LazyLoader` on Python 3.11, a deferred module answers `__spec__` and
`__path__` without loading, so `import ml_dtypes` elsewhere does not load it either. Loading is
guarded by a lock: a thread that reads an attribute while another loads the module waits.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from typing import Any

__all__ = ["DEFERRED", "install", "loaded"]

DEFERRED = (
    "ml_dtypes",
    "onnx._mapping",
    "onnx.compose",
    "onnx.gen_proto",
    "onnx.utils",
    "onnx.printer",
    "onnx.parser",
    "onnx.version_converter",
)
"""The modules deferred, in order (`onnx._mapping` is where `import onnx` reads ml_dtypes; the
rest are the submodules `import onnx` binds for its namespace only)."""

_LOCK = threading.RLock()


class _DeferredModule(types.ModuleType):
    """A module whose code runs in place on the first read of an attribute it lacks."""

    __loading_thread: int | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # dunder probes (copy, pickle, inspect) do not load
        with _LOCK:
            if type(self) is _DeferredModule:
                if self.__loading_thread == threading.get_ident():
                    raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
                self.__loading_thread = threading.get_ident()
                try:
                    spec = self.__spec__
                    assert spec is not None and spec.loader is not None
                    spec.loader.exec_module(self)
                finally:
                    self.__loading_thread = None
                self.__class__ = types.ModuleType  # type: ignore[assignment]  # plain from now on
        return object.__getattribute__(self, name)


def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of `name` found without importing its parent package."""
    parent, _, child = name.rpartition(".")
    if not parent:
        return importlib.util.find_spec(name)
    parent_spec = importlib.util.find_spec(parent)  # top-level: finding runs no code
    if parent_spec is None or not parent_spec.submodule_search_locations:
        return None
    for folder in parent_spec.submodule_search_locations:
        path = os.path.join(folder, f"{child}.py")
        if os.path.exists(path):
            return importlib.util.spec_from_file_location(name, path)
    return None


def install() -> None:
    """Defer `DEFERRED` (idempotent; a module already imported, or one whose package is not
    laid out as expected, is left alone)."""
    with _LOCK:
        for name in DEFERRED:
            if name in sys.modules or name.partition(".")[0] in sys.modules:
                continue
            spec = _spec(name)
            if spec is None or spec.loader is None:
                continue
            module = _DeferredModule(name)
            module.__spec__ = spec
            module.__loader__ = spec.loader
            module.__file__ = spec.origin
            module.__package__ = spec.parent
            if spec.submodule_search_locations is not None:
                module.__path__ = list(spec.submodule_search_locations)
            sys.modules[name] = module


def loaded(name: str) -> bool:
    """Whether `name` was imported and its code ran (not merely deferred)."""
    module = sys.modules.get(name)
    return module is not None and type(module) is not _DeferredModule
