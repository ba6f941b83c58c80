"""`onnxruntime.capi.onnxruntime_inference_collection`: onnxruntime's Python-level classes and
helpers, as turnout's objects."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from turnout.api.capi import _pybind_state as C
from turnout.api.capi.onnxruntime_pybind11_state import copy_tensors
from turnout.api.compiler import ModelCompiler
from turnout.api.ep_context import (
    GetInitializerLocationFunc,
    make_get_initializer_location_func_wrapper,
)
from turnout.api.io_binding import IOBinding
from turnout.api.lora import AdapterFormat
from turnout.api.options import RunOptions, SessionOptions
from turnout.api.ort_enums import OrtDeviceVendorId
from turnout.api.session import InferenceSession, NodeArg
from turnout.api.values import OrtDevice, OrtValue, SparseTensor

__all__ = [
    "AdapterFormat",
    "C",
    "GetInitializerLocationFunc",
    "IOBinding",
    "InferenceSession",
    "ModelCompiler",
    "NodeArg",
    "OrtDevice",
    "OrtDeviceVendorId",
    "OrtValue",
    "RunOptions",
    "Session",
    "SessionOptions",
    "SparseTensor",
    "check_and_normalize_provider_args",
    "copy_tensors",
    "get_ort_device_type",
    "get_vendor_id_for_device_type",
    "make_get_initializer_location_func_wrapper",
]

Session = InferenceSession  # onnxruntime's base class of InferenceSession; one class here

# device type name -> (OrtDevice type code, vendor); codes as OrtDevice's (cpu 0, gpu 1, npu 3)
_DEVICE_TYPES: dict[str, tuple[int, OrtDeviceVendorId | None]] = {
    "cpu": (0, None),
    "cuda": (1, OrtDeviceVendorId.NVIDIA),
    "gpu": (1, None),
    "dml": (4, OrtDeviceVendorId.MICROSOFT),
    "npu": (3, None),
    "cann": (3, OrtDeviceVendorId.HUAWEI),
    "webgpu": (1, OrtDeviceVendorId.NONE),
}


def _device_entry(device_type: str) -> tuple[int, OrtDeviceVendorId | None]:
    try:
        return _DEVICE_TYPES[device_type.lower()]
    except KeyError:
        raise Exception(f"Unsupported device type: {device_type}") from None


def get_ort_device_type(device_type: str) -> int:
    """OrtDevice's type code for a device name ("cpu" 0, "cuda"/"gpu" 1, ...)."""
    return _device_entry(device_type)[0]


def get_vendor_id_for_device_type(device_type: str) -> OrtDeviceVendorId | None:
    """The vendor a device name implies ("cuda": NVIDIA), or None when it implies none."""
    return _device_entry(device_type)[1]


def check_and_normalize_provider_args(
    providers: Sequence[str | tuple[str, dict[Any, Any]]] | None,
    provider_options: Sequence[dict[Any, Any]] | None,
    available_provider_names: Sequence[str],
) -> tuple[list[str], list[dict[str, str]]]:
    """Split `providers` (names or (name, options) pairs) and `provider_options` into a list of
    names and a list of option dicts with string values, dropping duplicates with a warning and
    warning about names not in `available_provider_names`."""
    if providers is None:
        return [], []
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError(
            "'providers' and 'provider_options' should be the same length if both are given."
        )
    names: list[str] = []
    options: list[dict[str, str]] = []
    for i, entry in enumerate(providers):
        if isinstance(entry, str):
            name, opts = entry, (provider_options[i] if provider_options is not None else {})
        elif (
            isinstance(entry, tuple)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], dict)
        ):
            if provider_options is not None:
                raise ValueError(
                    "Only string values for 'providers' are supported if 'provider_options' "
                    "is given."
                )
            name, opts = entry
        else:
            raise ValueError("'providers' values must be either strings or (string, dict) tuples.")
        if name not in available_provider_names:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: {', '.join(available_provider_names)!r}",
                stacklevel=2,
            )
        if name in names:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", stacklevel=2)
            continue
        names.append(name)
        options.append({str(k): str(v) for k, v in opts.items()})
    return names, options
