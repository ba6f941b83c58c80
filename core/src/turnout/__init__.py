"""turnout: an ONNX runtime whose execution providers are plugins.

It mirrors onnxruntime's public Python API. To run an unchanged onnxruntime application on
turnout, call `turnout.install_as_onnxruntime()` before it imports onnxruntime, or start it with
`python -m turnout.as_onnxruntime script.py args` (see docs/drop-in.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from turnout import _deferred_imports, _moved
from turnout._submodules import submodule
from turnout._version import ORT_API_VERSION, __version__

# ml_dtypes (imported by onnx) runs only when a model needs its types: 0.35-0.45 s saved
_deferred_imports.install()

if TYPE_CHECKING:  # the names as type checkers and readers see them; _LAZY must agree
    from turnout.api import (
        backend,
        capi,
        datasets,  # noqa: F401 (not in __all__: star-imports skip it)
    )
    from turnout.api.capi import onnxruntime_validation
    from turnout.api.capi.onnxruntime_pybind11_state import (
        OrtSyncStream,
        copy_tensors,
        has_collective_ops,
    )
    from turnout.api.compiler import ModelCompiler, OrtCompileApiFlags
    from turnout.api.environment import (
        ArenaExtendStrategy,
        OrtArenaCfg,
        create_and_register_allocator,
        create_and_register_allocator_v2,
        disable_telemetry_events,
        enable_telemetry_events,
        set_default_logger_callback,
        set_global_thread_pool_sizes,
        set_seed,
    )
    from turnout.api.ep_assignment import OrtEpAssignedNode, OrtEpAssignedSubgraph
    from turnout.api.ep_context import (
        OrtEpContextData,
        OrtEpContextDataBuffer,
        OrtExternalInitializerInfo,
    )
    from turnout.api.ep_devices import (
        OrtEpDevice,
        OrtExecutionProviderDevicePolicy,
        OrtHardwareDevice,
        OrtHardwareDeviceType,
        get_ep_devices,
    )
    from turnout.api.ep_library import (
        register_execution_provider_library,
        unregister_execution_provider_library,
    )
    from turnout.api.io_binding import IOBinding, SessionIOBinding
    from turnout.api.lora import AdapterFormat, LoraAdapter
    from turnout.api.model_package import (
        ModelPackage,
        ModelPackageComponentContext,
        ModelPackageContext,
        ModelPackageOptions,
        ModelPackageWriteMode,
    )
    from turnout.api.options import (
        ExecutionMode,
        ExecutionOrder,
        GraphOptimizationLevel,
        RunOptions,
        SessionOptions,
    )
    from turnout.api.ort_enums import (
        OrtDeviceMemoryType,
        OrtDeviceVendorId,
        OrtMemoryInfoDeviceType,
        OrtSparseFormat,
    )
    from turnout.api.session import (
        InferenceSession,
        ModelMetadata,
        NodeArg,
        get_all_providers,
        get_available_providers,
        get_build_info,
        get_device,
        get_version_string,
    )
    from turnout.api.values import (
        OrtAllocatorType,
        OrtDevice,
        OrtMemoryInfo,
        OrtMemType,
        OrtValue,
        SparseTensor,
    )
    from turnout.graph.errors import (
        EngineError,
        EPFail,
        Fail,
        FallbackError,
        InvalidArgument,
        InvalidGraph,
        InvalidProtobuf,
        ModelLoaded,
        NoModel,
        NoSuchFile,
        NotImplemented,
        RuntimeException,
        TurnoutError,
    )
    from turnout.graph.logs import set_severity as set_default_logger_severity
    from turnout.graph.logs import set_verbosity as set_default_logger_verbosity
    from turnout.sdk.hookspecs import hookimpl
    from turnout.sdk.plugins import register_provider

_NAMES_IN: dict[str, str] = {
    # module → the public names it defines, re-exported here under the same name
    "turnout.api.capi.onnxruntime_pybind11_state": "OrtSyncStream copy_tensors has_collective_ops",
    "turnout.api.compiler": "ModelCompiler OrtCompileApiFlags",
    "turnout.api.environment": (
        "ArenaExtendStrategy OrtArenaCfg "
        "create_and_register_allocator create_and_register_allocator_v2 "
        "disable_telemetry_events enable_telemetry_events "
        "set_default_logger_callback set_global_thread_pool_sizes set_seed"
    ),
    "turnout.api.ep_assignment": "OrtEpAssignedNode OrtEpAssignedSubgraph",
    "turnout.api.ep_context": (
        "OrtEpContextData OrtEpContextDataBuffer OrtExternalInitializerInfo"
    ),
    "turnout.api.ep_devices": (
        "OrtEpDevice OrtExecutionProviderDevicePolicy OrtHardwareDevice "
        "OrtHardwareDeviceType get_ep_devices"
    ),
    "turnout.api.ep_library": (
        "register_execution_provider_library unregister_execution_provider_library"
    ),
    "turnout.api.io_binding": "IOBinding SessionIOBinding",
    "turnout.api.lora": "AdapterFormat LoraAdapter",
    "turnout.api.model_package": (
        "ModelPackage ModelPackageComponentContext ModelPackageContext ModelPackageOptions "
        "ModelPackageWriteMode"
    ),
    "turnout.api.options": (
        "ExecutionMode ExecutionOrder GraphOptimizationLevel RunOptions SessionOptions"
    ),
    "turnout.api.ort_enums": (
        "OrtDeviceMemoryType OrtDeviceVendorId OrtMemoryInfoDeviceType OrtSparseFormat"
    ),
    "turnout.api.session": (
        "InferenceSession ModelMetadata NodeArg get_all_providers "
        "get_available_providers get_build_info get_device get_version_string"
    ),
    "turnout.api.values": (
        "OrtAllocatorType OrtDevice OrtMemoryInfo OrtMemType OrtValue SparseTensor"
    ),
    "turnout.graph.errors": (
        "EngineError EPFail Fail FallbackError InvalidArgument InvalidGraph "
        "InvalidProtobuf ModelLoaded NoModel NoSuchFile NotImplemented "
        "RuntimeException TurnoutError"
    ),
    "turnout.sdk.hookspecs": "hookimpl",
    "turnout.sdk.plugins": "register_provider",
}
_LAZY: dict[str, str] = {
    # a public name → "module:attribute", or "module" where the name is that module
    **{name: f"{module}:{name}" for module, names in _NAMES_IN.items() for name in names.split()},
    "set_default_logger_severity": "turnout.graph.logs:set_severity",
    "set_default_logger_verbosity": "turnout.graph.logs:set_verbosity",
    "backend": "turnout.api.backend",
    "capi": "turnout.api.capi",
    "onnxruntime_validation": "turnout.api.capi.onnxruntime_validation",
    "datasets": "turnout.api.datasets",
}

# old paths (turnout.session, turnout.provider, ...) import as the moved modules; `import
# turnout.OLD` runs this package first, so every old path sees the finder
_moved.install()

version = __version__
package_name = "turnout"
cuda_version = ""  # as onnxruntime's CPU package: CUDA lives in providers (turnout-cupy)
import_capi_exception = None  # onnxruntime's: the native module's import error, None when fine

__all__ = [
    "ORT_API_VERSION",
    "AdapterFormat",
    "ArenaExtendStrategy",
    "EPFail",
    "EngineError",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "FallbackError",
    "GraphOptimizationLevel",
    "IOBinding",
    "InferenceSession",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "LoraAdapter",
    "ModelCompiler",
    "ModelLoaded",
    "ModelPackage",
    "ModelPackageComponentContext",
    "ModelPackageContext",
    "ModelPackageOptions",
    "ModelPackageWriteMode",
    "ModelMetadata",
    "NoModel",
    "NoSuchFile",
    "NodeArg",
    "NotImplemented",
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtCompileApiFlags",
    "OrtDevice",
    "OrtDeviceMemoryType",
    "OrtDeviceVendorId",
    "OrtEpAssignedNode",
    "OrtEpAssignedSubgraph",
    "OrtEpContextData",
    "OrtEpContextDataBuffer",
    "OrtEpDevice",
    "OrtExecutionProviderDevicePolicy",
    "OrtExternalInitializerInfo",
    "OrtHardwareDevice",
    "OrtHardwareDeviceType",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType",
    "OrtSparseFormat",
    "OrtSyncStream",
    "OrtValue",
    "RunOptions",
    "RuntimeException",
    "SessionIOBinding",
    "SessionOptions",
    "SparseTensor",
    "TurnoutError",
    "__version__",
    "backend",
    "capi",
    "copy_tensors",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "cuda_version",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_device",
    "get_ep_devices",
    "get_version_string",
    "has_collective_ops",
    "hookimpl",
    "import_capi_exception",
    "install_as_onnxruntime",
    "onnxruntime_validation",
    "package_name",
    "preload_dlls",
    "print_debug_info",
    "register_execution_provider_library",
    "register_provider",
    "set_default_logger_callback",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_global_thread_pool_sizes",
    "set_seed",
    "unregister_execution_provider_library",
    "version",
]


def install_as_onnxruntime() -> None:
    """Make `import onnxruntime` (and its submodules) load turnout in this process.

    Call it before the application imports onnxruntime. `onnxruntime.__version__` then reads
    as `ORT_API_VERSION`; `turnout.__version__` stays turnout's own.
    """
    import sys

    from turnout.api.as_onnxruntime import install

    install(sys.modules[__name__])


def preload_dlls(
    cuda: bool = True, cudnn: bool = True, msvc: bool = True, directory: str | None = None
) -> None:
    """Nothing to preload: turnout loads no native libraries of its own (device providers load
    theirs when they probe). Accepted so applications that call it run."""


def print_debug_info() -> None:
    """Print turnout's version, the mirrored onnxruntime API version and the providers."""
    from turnout.api.session import get_all_providers, get_available_providers

    print(f"turnout {__version__} (onnxruntime API {ORT_API_VERSION})")
    print(f"available providers: {get_available_providers()}")
    print(f"all providers: {get_all_providers()}")


def __getattr__(name: str) -> Any:
    """A public name on first use: its module is imported then, not by `import turnout`."""
    where = _LAZY.get(name)
    if where is None:  # a subpackage (turnout.sdk, ...), as the eager import gave them
        return submodule(__name__, name)
    module_name, _, attribute = where.partition(":")
    module = importlib.import_module(module_name)
    value = getattr(module, attribute) if attribute else module
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
