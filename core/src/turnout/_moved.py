"""Old import paths of modules that moved into the layers, kept working.

Core was regrouped into layers (graph, sdk, engine, api, tools); `turnout.session`,
`turnout.provider`, `turnout.capi.onnxruntime_pybind11_state` and every other old path still
import. A finder on `sys.meta_path` resolves an old name to the module at its new place, the
same module object (so `isinstance`, monkeypatching and pickles agree whichever name was used).
New code imports the new paths; these aliases are for applications and third-party providers.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "OUTSIDE", "AliasLoader", "install", "new_name"]

_LAYERS = {
    "graph": "contrib dtypes errors ir logs model shape_inference structure tensors validate",
    "sdk": "blas_threads custom_ops devices fusion hookspecs plugins provider provider_options "
    "semantics",
    "engine": "executor partition pipeline profiling provider_selection report_render",
    "api": "as_onnxruntime backend capi compiler datasets environment feeds ep_assignment "
    "ep_devices ep_library io_binding lora options ort_enums session values",
    "tools": "cli concurrency models quantization ray scaffold testing",
}

MOVED: dict[str, str] = {
    f"turnout.{name}": f"turnout.{layer}.{name}"
    for layer, names in _LAYERS.items()
    for name in names.split()
}
"""Old top-level module or package → its place in a layer (submodules follow their package)."""

# single modules that moved on: docs/contrib-ops.md's generator reads the providers' kernel
# registries, so it left the graph layer for the tools
MOVED["turnout.contrib.table"] = "turnout.tools.contrib_table"

# not an old name: the provider contract's short public name (`import turnout.ep as ep`)
MOVED["turnout.ep"] = "turnout.sdk.ep"

OUTSIDE: dict[str, str] = {
    "turnout.models.zoo": "turnout_testbed.zoo",
    "turnout.models.apps": "turnout_testbed.apps",
    "turnout.fake_device": "turnout_testbed.fake_device",
}
"""Old modules that left the runtime wheel for the turnout-testbed distribution (test and
benchmark models, the fake device): importable by the old path where it is installed."""
MOVED.update(OUTSIDE)


def new_name(fullname: str) -> str | None:
    """The new dotted name of an old one (a module or anything inside it), or None."""
    if fullname in MOVED:
        return MOVED[fullname]
    head, _, rest = fullname.partition(".")
    second, _, tail = rest.partition(".")
    moved = MOVED.get(f"{head}.{second}")
    if moved is None:
        return None
    return f"{moved}.{tail}" if tail else moved


class AliasLoader(importlib.abc.Loader):
    """Hands out the module at another name (imported then, if it is not yet): old paths here,
    onnxruntime's names in `turnout.api.as_onnxruntime`."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing runs (the module ran under its new name); the import system has set the
        alias's spec on it, so its own goes back (importlib.resources, runpy and pickle
        read it)."""
        module.__spec__ = self.own_spec

    def get_code(self, fullname: str) -> object:
        """The new module's code, for `python -m OLD.NAME` (runpy runs it as __main__)."""
        spec = importlib.util.find_spec(self.target)
        assert spec is not None and spec.loader is not None
        return spec.loader.get_code(self.target)  # type: ignore[attr-defined]


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname)
        if new is None:
            return None
        try:
            found = importlib.util.find_spec(new)
        except ModuleNotFoundError:
            if fullname not in OUTSIDE:
                raise
            raise ModuleNotFoundError(
                f"{fullname} moved to {new}, which the turnout-testbed distribution installs "
                "(pip install ./testbed from a turnout checkout)",
                name=fullname,
            ) from None
        if found is None:
            return None
        is_package = found.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, AliasLoader(new), is_package=is_package)


def install() -> None:
    """Put the finder first on `sys.meta_path` (idempotent)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
