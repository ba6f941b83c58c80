"""Every public name of the installed onnxruntime exists in turnout, or is reviewed with a reason.

The inventory is built when the test runs, from the installed onnxruntime, so a new onnxruntime
release shows up here as new gaps. A name counts as public when it does not start with "_" and is
onnxruntime's own: names bound to something defined outside onnxruntime (the `os`, `warnings` or
`onnx.helper` modules, `typing.Any`, onnx's `ModelProto`) are imports, not API.

Two lists hold the exceptions, and both must shrink, never hide anything:
- `REVIEWED`: names turnout does not mirror, each with the reason.
- `PENDING_MEMBERS`: names other work is adding now (object members and new classes of the
  object-API work, exception classes for turnout.graph.errors); the lead empties it.

`python3 tests/test_ort_inventory.py` prints the counts per module, raw and after the lists.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import types
import warnings
from typing import Any

import pytest

# module of onnxruntime -> module of turnout that stands in for it
MODULES = {
    "onnxruntime": "turnout",
    "onnxruntime.capi": "turnout.api.capi",
    "onnxruntime.capi._pybind_state": "turnout.api.capi._pybind_state",
    "onnxruntime.capi.onnxruntime_pybind11_state": "turnout.api.capi.onnxruntime_pybind11_state",
    "onnxruntime.capi.onnxruntime_inference_collection": (
        "turnout.api.capi.onnxruntime_inference_collection"
    ),
    "onnxruntime.backend": "turnout.api.backend",
    "onnxruntime.backend.backend": "turnout.api.backend.backend",
    "onnxruntime.datasets": "turnout.api.datasets",
}

# objects whose public members are compared: key -> ("module:attr" in onnxruntime, in turnout)
_C = "onnxruntime.capi._pybind_state"
OBJECTS = {
    "InferenceSession": ("onnxruntime:InferenceSession", "turnout:InferenceSession"),
    "SessionOptions": ("onnxruntime:SessionOptions", "turnout:SessionOptions"),
    "RunOptions": ("onnxruntime:RunOptions", "turnout:RunOptions"),
    "OrtValue": ("onnxruntime:OrtValue", "turnout:OrtValue"),
    "IOBinding": ("onnxruntime:IOBinding", "turnout:IOBinding"),
    "SparseTensor": ("onnxruntime:SparseTensor", "turnout:SparseTensor"),
    "OrtDevice": ("onnxruntime:OrtDevice", "turnout:OrtDevice"),
    "NodeArg": ("onnxruntime:NodeArg", "turnout:NodeArg"),
    "ModelMetadata": ("onnxruntime:ModelMetadata", "turnout:ModelMetadata"),
    "OrtMemoryInfo": ("onnxruntime:OrtMemoryInfo", "turnout:OrtMemoryInfo"),
    "OrtArenaCfg": ("onnxruntime:OrtArenaCfg", "turnout:OrtArenaCfg"),
    "LoraAdapter": ("onnxruntime:LoraAdapter", "turnout:LoraAdapter"),
    "AdapterFormat": ("onnxruntime:AdapterFormat", "turnout:AdapterFormat"),
    "OrtValueVector": (f"{_C}:OrtValueVector", "turnout.api.capi._pybind_state:OrtValueVector"),
    "SessionIOBinding": (
        f"{_C}:SessionIOBinding",
        "turnout.api.capi._pybind_state:SessionIOBinding",
    ),
    "SparseCooView": (f"{_C}:SparseCooView", "turnout.api.capi._pybind_state:SparseCooView"),
    "SparseCsrView": (f"{_C}:SparseCsrView", "turnout.api.capi._pybind_state:SparseCsrView"),
    "SparseBlockSparseView": (
        f"{_C}:SparseBlockSparseView",
        "turnout.api.capi._pybind_state:SparseBlockSparseView",
    ),
    "GraphOptimizationLevel": (
        "onnxruntime:GraphOptimizationLevel",
        "turnout:GraphOptimizationLevel",
    ),
    "ExecutionMode": ("onnxruntime:ExecutionMode", "turnout:ExecutionMode"),
    "ExecutionOrder": ("onnxruntime:ExecutionOrder", "turnout:ExecutionOrder"),
    "OrtMemType": ("onnxruntime:OrtMemType", "turnout:OrtMemType"),
    "OrtAllocatorType": ("onnxruntime:OrtAllocatorType", "turnout:OrtAllocatorType"),
    "OrtSparseFormat": ("onnxruntime:OrtSparseFormat", "turnout:OrtSparseFormat"),
    "OrtDeviceVendorId": ("onnxruntime:OrtDeviceVendorId", "turnout:OrtDeviceVendorId"),
    "OrtDeviceMemoryType": ("onnxruntime:OrtDeviceMemoryType", "turnout:OrtDeviceMemoryType"),
    "OrtMemoryInfoDeviceType": (
        "onnxruntime:OrtMemoryInfoDeviceType",
        "turnout:OrtMemoryInfoDeviceType",
    ),
    "ArenaExtendStrategy": (f"{_C}:ArenaExtendStrategy", "turnout:ArenaExtendStrategy"),
    "OnnxRuntimeBackend": (
        "onnxruntime.backend.backend:OnnxRuntimeBackend",
        "turnout.api.backend.backend:OnnxRuntimeBackend",
    ),
    "OnnxRuntimeBackendRep": (
        "onnxruntime.backend.backend_rep:OnnxRuntimeBackendRep",
        "turnout.api.backend.backend_rep:OnnxRuntimeBackendRep",
    ),
}

# Dunder members that are API (protocols users call through), compared like public names.
API_DUNDERS = frozenset({"__dlpack__", "__dlpack_device__"})

# Module-level names turnout does not mirror. A bare name applies wherever it appears
# (onnxruntime re-exports its native module's names at three places).
REVIEWED: dict[str, str] = {}

# Names that work in progress is adding (kept apart from REVIEWED so it is emptied): none now.
PENDING_MEMBERS: dict[str, str] = {}


def _resolve(spec: str) -> Any:
    mod, _, attr = spec.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _is_import(value: Any) -> bool:
    """True for a name bound to something defined outside onnxruntime."""
    if isinstance(value, types.ModuleType):
        # a submodule is an attribute once anything imported it (the tests import
        # onnxruntime.quantization and .transformers): the mirrored ones are compared as
        # modules (MODULES), the others are not mirrored (docs/drop-in.md)
        return True
    if inspect.isclass(value) or inspect.isfunction(value) or inspect.isbuiltin(value):
        return not str(getattr(value, "__module__", "onnxruntime")).startswith("onnxruntime")
    return type(value).__module__ in ("typing", "collections.abc", "__future__")


def ort_module_names(module: types.ModuleType) -> list[str]:
    values = {n: getattr(module, n) for n in dir(module) if not n.startswith("_")}
    return sorted(n for n, v in values.items() if not _is_import(v))


def ort_member_names(obj: Any) -> list[str]:
    return sorted(n for n in dir(obj) if not n.startswith("_") or n in API_DUNDERS)


def _has(obj: Any, name: str) -> bool:
    try:
        return hasattr(obj, name)
    except Exception:  # a lazy module attribute that fails to import counts as missing
        return False


def _has_member(cls: Any, name: str) -> bool:
    """`name` on the class, or on an instance: dataclass fields, enum members' `name`/`value`,
    attributes set in `__init__` of a class that constructs without arguments."""
    if cls is None:
        return False
    if _has(cls, name) or name in getattr(cls, "__dataclass_fields__", {}):
        return True
    if isinstance(cls, enum.EnumMeta):
        return any(_has(m, name) for m in cls)
    try:
        instance = cls()
    except Exception:
        return False
    return _has(instance, name)


def inventory() -> dict[str, list[str]]:
    """Missing names: {onnxruntime module or "Object": [key as in REVIEWED]} before the lists."""
    with warnings.catch_warnings():  # onnxruntime.backend imports the deprecated onnx.version
        warnings.simplefilter("ignore", DeprecationWarning)
        return _inventory()


def _inventory() -> dict[str, list[str]]:
    missing: dict[str, list[str]] = {}
    for ort_name, tn_name in MODULES.items():
        ort_mod = importlib.import_module(ort_name)
        try:
            tn_mod: Any = importlib.import_module(tn_name)
        except ImportError:
            tn_mod = None
        missing[ort_name] = [n for n in ort_module_names(ort_mod) if not _has(tn_mod, n)]
    for key, (ort_spec, tn_spec) in OBJECTS.items():
        ort_obj = _resolve(ort_spec)
        try:
            tn_obj: Any = _resolve(tn_spec)
        except (ImportError, AttributeError):
            tn_obj = None
        missing[key] = [
            f"{key}.{n}" for n in ort_member_names(ort_obj) if not _has_member(tn_obj, n)
        ]
    return missing


def unexplained(missing: dict[str, list[str]]) -> dict[str, list[str]]:
    out = {}
    for where, names in missing.items():
        left = [n for n in names if n not in REVIEWED and n not in PENDING_MEMBERS]
        if left:
            out[where] = left
    return out


@pytest.fixture(scope="module")
def missing() -> dict[str, list[str]]:
    pytest.importorskip(
        "onnxruntime", reason="onnxruntime is not installed: the inventory is built from it"
    )
    return inventory()


@pytest.mark.parametrize("where", [*MODULES, *OBJECTS])
def test_nothing_missing_unreviewed(missing: dict[str, list[str]], where: str) -> None:
    left = unexplained({where: missing[where]}).get(where, [])
    assert not left, f"turnout lacks these names of {where}: {left}"


def test_lists_hold_only_missing_names(missing: dict[str, list[str]]) -> None:
    """A name that turnout now has, or that onnxruntime dropped, leaves the lists."""
    found = {n for names in missing.values() for n in names}
    stale = sorted(n for n in [*REVIEWED, *PENDING_MEMBERS] if n not in found)
    assert not stale, f"remove from REVIEWED/PENDING_MEMBERS (no longer missing): {stale}"


if __name__ == "__main__":
    raw = inventory()
    left = unexplained(raw)
    for where, names in raw.items():
        pending = [n for n in names if n in PENDING_MEMBERS]
        print(
            f"{where:52} missing {len(names):3}  pending {len(pending):3}"
            f"  unexplained {len(left.get(where, [])):3}"
        )
    print(
        f"total missing {sum(map(len, raw.values()))}, unexplained {sum(map(len, left.values()))}"
    )
    for where, names in left.items():
        print(where, names)
