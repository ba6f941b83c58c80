"""`register_execution_provider_library`: a provider that is not installed as a distribution.

onnxruntime loads a plugin EP from a shared library path. turnout's providers are Python, so
the path names a provider module (`my_ep.py`), a package folder, or a pure-Python wheel. The
module is a turnout plugin like any other: it defines the `turnout_providers` hook (see
`turnout.sdk.hookspecs`), and its factories join the registry under the registration name, until
`unregister_execution_provider_library(name)` removes them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import zipfile
from configparser import ConfigParser
from pathlib import Path
from types import ModuleType
from typing import Any

from turnout.graph.errors import Fail
from turnout.sdk.plugins import registry
from turnout.sdk.provider import ProviderFactory

__all__ = [
    "load_module",
    "register_execution_provider_library",
    "unregister_execution_provider_library",
]

_registered: dict[str, list[str]] = {}  # registration name -> factory names
_lock = threading.Lock()


def register_execution_provider_library(registration_name: str, path: str) -> None:
    """Load the provider module, package or wheel at `path` and register its providers."""
    name = str(registration_name)
    with _lock:
        if name in _registered:
            raise Fail(f"Execution provider library: {name} is already registered.")
        try:
            module = load_module(Path(path), name)
            factories = _factories(module)
        except Fail:
            raise
        except Exception as e:
            raise Fail(f"Failed to load library {path} with error: {type(e).__name__}: {e}") from e
        for factory in factories:
            registry.register(factory)
        _registered[name] = [f.name for f in factories]
    from turnout.sdk.devices import clear_cache

    clear_cache()


def unregister_execution_provider_library(registration_name: str) -> None:
    """Remove the providers a `register_execution_provider_library` call added."""
    with _lock:
        names = _registered.pop(str(registration_name), None)
        if names is None:
            raise Fail(f"Execution provider library: {registration_name} was not registered.")
        for n in names:
            registry.unregister(n)
    from turnout.sdk.devices import clear_cache

    clear_cache()


def load_module(path: Path, registration_name: str) -> ModuleType:
    """Import the module (.py), package folder or pure-Python wheel at `path`."""
    if not path.exists():
        raise Fail(f"Failed to load library {path} with error: no such file or folder")
    if path.is_file() and path.suffix in {".whl", ".zip"}:
        return importlib.import_module(_wheel_module(path))
    if path.is_dir():
        if not (path / "__init__.py").is_file():
            raise Fail(f"Failed to load library {path}: a folder must be a Python package")
        parent = str(path.parent)
        if parent not in sys.path:
            sys.path.insert(0, parent)
        return importlib.import_module(path.name)
    if path.suffix != ".py":
        raise Fail(
            f"Failed to load library {path}: turnout providers are Python; give a .py module, "
            "a package folder or a pure-Python wheel"
        )
    module_name = f"turnout_ep_library_{registration_name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise Fail(f"Failed to load library {path}: not importable")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _wheel_module(wheel: Path) -> str:
    """The module a wheel's `turnout` entry point names; the wheel joins sys.path (zipimport
    runs pure-Python wheels in place)."""
    with zipfile.ZipFile(wheel) as z:
        points = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        if not points:
            raise Fail(f"Failed to load library {wheel}: the wheel declares no entry points")
        parser = ConfigParser()
        parser.read_string(z.read(points[0]).decode("utf-8"))
    if not parser.has_section("turnout") or not parser.items("turnout"):
        raise Fail(f"Failed to load library {wheel}: no entry point in group 'turnout'")
    target = parser.items("turnout")[0][1].split(":")[0].strip()
    if str(wheel) not in sys.path:
        sys.path.insert(0, str(wheel))
    return target


def _factories(module: ModuleType) -> list[ProviderFactory]:
    hook: Any = getattr(module, "turnout_providers", None)
    if not callable(hook):
        raise Fail(
            f"{module.__name__} defines no turnout_providers() hook, so it brings no provider"
        )
    found = list(hook() or [])
    bad = [f for f in found if not isinstance(f, ProviderFactory)]
    if bad or not found:
        raise Fail(
            f"{module.__name__}.turnout_providers() must return ProviderFactory objects, "
            f"got {found!r}"
        )
    return found
