"""Run an unchanged onnxruntime application on turnout.

In code, before the application imports onnxruntime::

    import turnout
    turnout.install_as_onnxruntime()

From the shell::

    python -m turnout.as_onnxruntime script.py [args...]
    python -m turnout.as_onnxruntime -m package.module [args...]

`install()` puts an `onnxruntime` module and its submodules into `sys.modules`. Every name of
the `onnxruntime` module is turnout's (the same objects, so `isinstance` checks agree), except
the few that describe the package: `__version__` and `version` read as `ORT_API_VERSION`, the
onnxruntime API version turnout mirrors, and `package_name` as "onnxruntime".
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import types
from collections.abc import Sequence
from typing import Any

from turnout._moved import AliasLoader

__all__ = ["MIRRORED_MODULES", "MIRRORED_PACKAGES", "install", "installed", "main"]

# onnxruntime submodule -> the turnout module that stands in for it
MIRRORED_MODULES = {
    "onnxruntime.capi": "turnout.api.capi",
    "onnxruntime.capi._pybind_state": "turnout.api.capi._pybind_state",
    "onnxruntime.capi.onnxruntime_pybind11_state": "turnout.api.capi.onnxruntime_pybind11_state",
    "onnxruntime.capi.onnxruntime_inference_collection": (
        "turnout.api.capi.onnxruntime_inference_collection"
    ),
    "onnxruntime.capi.onnxruntime_validation": "turnout.api.capi.onnxruntime_validation",
    "onnxruntime.capi.build_and_package_info": "turnout.api.capi.build_and_package_info",
    "onnxruntime.backend": "turnout.api.backend",
    "onnxruntime.backend.backend": "turnout.api.backend.backend",
    "onnxruntime.backend.backend_rep": "turnout.api.backend.backend_rep",
    "onnxruntime.datasets": "turnout.api.datasets",
    "onnxruntime.tools": "turnout.tools",
    "onnxruntime.tools.symbolic_shape_infer": "turnout.tools.symbolic_shape_infer",
}
# onnxruntime package -> turnout package whose submodules stand in for its submodules too
MIRRORED_PACKAGES = {"onnxruntime.quantization": "turnout.tools.quantization"}


def _stand_in(fullname: str) -> str | None:
    if fullname in MIRRORED_MODULES:
        return MIRRORED_MODULES[fullname]
    for package, target in MIRRORED_PACKAGES.items():
        if fullname == package or fullname.startswith(package + "."):
            return target + fullname[len(package) :]
    return None


class _OnnxruntimeModule(types.ModuleType):
    """`onnxruntime`: turnout's names, read through, with onnxruntime's package identity."""

    _package: types.ModuleType  # the turnout package whose names it reads through

    def __getattr__(self, name: str) -> Any:
        return getattr(self._package, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._package)) | set(vars(self)))


def installed() -> bool:
    """True when `onnxruntime` in this process is turnout."""
    return isinstance(sys.modules.get("onnxruntime"), _OnnxruntimeModule)


class _MirrorFinder(importlib.abc.MetaPathFinder):
    """`import onnxruntime.X` gives the turnout module standing in for X, imported then: an
    application pays for the parts of onnxruntime it imports, as with onnxruntime."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        stand_in = _stand_in(fullname)
        if stand_in is None or not installed():
            return None
        found = importlib.util.find_spec(stand_in)
        if found is None:
            return None
        is_package = found is not None and found.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(
            fullname, AliasLoader(stand_in), is_package=is_package
        )


def install(package: types.ModuleType) -> None:
    """Make `import onnxruntime` and its submodules give turnout (idempotent); `package` is the
    `turnout` package (`turnout.install_as_onnxruntime()` passes itself, so this façade module
    does not import the package root that re-exports it). Any onnxruntime already imported in
    this process is replaced for later imports; objects taken from it before stay what they
    were."""
    if installed():
        return
    for name in [m for m in sys.modules if m == "onnxruntime" or m.startswith("onnxruntime.")]:
        del sys.modules[name]
    module = _OnnxruntimeModule("onnxruntime", package.__doc__)
    module._package = package
    module.__file__ = package.__file__
    module.__path__ = []  # a package: submodules come from sys.modules, unknown ones fail
    module.__spec__ = importlib.machinery.ModuleSpec("onnxruntime", None, is_package=True)
    module.__version__ = package.ORT_API_VERSION  # type: ignore[attr-defined]
    module.version = package.ORT_API_VERSION  # type: ignore[attr-defined]
    module.package_name = "onnxruntime"  # type: ignore[attr-defined]
    sys.modules["onnxruntime"] = module
    if not any(isinstance(f, _MirrorFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MirrorFinder())


_USAGE = """usage: python -m turnout.as_onnxruntime script.py [args...]
       python -m turnout.as_onnxruntime -m module [args...]

Runs the script or module with `import onnxruntime` giving turnout."""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_USAGE)
        return 0 if args else 2
    # the package this module is part of: Python imports it before any of its modules (also
    # under `python -m`, where __name__ is "__main__" but __package__ stays)
    install(sys.modules[str(__package__).partition(".")[0]])
    if args[0] == "-m":
        if len(args) < 2:
            print(_USAGE, file=sys.stderr)
            return 2
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))  # as `python script.py` does
        runpy.run_path(args[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
