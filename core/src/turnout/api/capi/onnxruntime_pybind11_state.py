"""`onnxruntime.capi.onnxruntime_pybind11_state`: the names of onnxruntime's native module.

In onnxruntime this module holds the whole native API (sessions, options, values, exceptions,
enums, environment functions). Here each name is turnout's own object: the session classes are
turnout's `InferenceSession`, `SessionOptions`, ... so code that imports them from here gets the
same classes as `import turnout`.
"""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass
from typing import Any

import onnx.defs

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
from turnout.api.ep_compatibility import (
    OrtCompiledModelCompatibility,
    OrtDeviceEpIncompatibilityReason,
    get_compatibility_info_from_model,
    get_compatibility_info_from_model_bytes,
    get_hardware_device_ep_incompatibility_details,
    get_hardware_devices,
    get_model_compatibility_for_ep_devices,
    provider_for,
)
from turnout.api.ep_context import (
    ModelRequiresCompilation,
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
from turnout.api.io_binding import SessionIOBinding
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
from turnout.api.ort_enums import OrtDeviceMemoryType, OrtMemoryInfoDeviceType, OrtSparseFormat
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
from turnout.api.tensor_copies import OrtSyncStream, copy_tensors
from turnout.api.values import (
    OrtAllocatorType,
    OrtDevice,
    OrtMemoryInfo,
    OrtMemType,
    OrtValue,
    OrtValueVector,
    SparseBlockSparseView,
    SparseCooView,
    SparseCsrView,
    SparseTensor,
)
from turnout.graph import logs
from turnout.graph.errors import (
    DeviceReset,
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    NoModel,
    NoSuchFile,
    NotFound,
    NotImplemented,
    RuntimeException,
)
from turnout.sdk.ep import KernelTable

__all__ = [
    "AdapterFormat",
    "ModelCompiler",
    "ModelPackage",
    "ModelPackageComponentContext",
    "ModelPackageContext",
    "ModelPackageOptions",
    "ModelPackageWriteMode",
    "ModelRequiresCompilation",
    "OrtCompiledModelCompatibility",
    "OrtDeviceEpIncompatibilityReason",
    "OrtEpContextData",
    "OrtEpContextDataBuffer",
    "OrtExternalInitializerInfo",
    "get_compatibility_info_from_model",
    "get_compatibility_info_from_model_bytes",
    "get_hardware_device_ep_incompatibility_details",
    "get_hardware_devices",
    "get_model_compatibility_for_ep_devices",
    "get_registered_ep_kernel_defs",
    "OrtCompileApiFlags",
    "OrtEpAssignedNode",
    "OrtEpAssignedSubgraph",
    "OrtEpDevice",
    "OrtExecutionProviderDevicePolicy",
    "OrtHardwareDevice",
    "OrtHardwareDeviceType",
    "get_ep_devices",
    "register_execution_provider_library",
    "unregister_execution_provider_library",
    "ArenaExtendStrategy",
    "DeviceReset",
    "LoraAdapter",
    "ModelLoadCanceled",
    "NotFound",
    "OrtValueVector",
    "SessionIOBinding",
    "SparseBlockSparseView",
    "SparseCooView",
    "SparseCsrView",
    "EPFail",
    "EngineError",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "GraphOptimizationLevel",
    "InferenceSession",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "ModelLoaded",
    "ModelMetadata",
    "NoModel",
    "NoSuchFile",
    "NodeArg",
    "NotImplemented",
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtDevice",
    "OrtDeviceMemoryType",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType",
    "OrtSparseFormat",
    "OrtSyncStream",
    "OrtValue",
    "RunOptions",
    "RuntimeException",
    "SessionObjectInitializer",
    "SessionOptions",
    "SparseTensor",
    "copy_tensors",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "get_all_operator_schema",
    "get_all_opkernel_def",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_default_session_options",
    "get_device",
    "get_session_initializer",
    "get_version_string",
    "has_collective_ops",
    "kNextPowerOfTwo",
    "kSameAsRequested",
    "opkernel",
    "schemadef",
    "set_default_logger_callback",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_global_thread_pool_sizes",
    "set_seed",
]

WEIGHT_PACKING = "turnout.tools.quantization.weight_packing"
"""Where onnxruntime's native weight-packing helpers live in turnout: the quantization tools,
a layer above this one. They are read on first use by name (`__getattr__`), so the API layer
imports nothing from the tools and `import turnout` loads no quantization code."""
_WEIGHT_PACKING_NAMES = frozenset(
    {
        "pack_fp4_weights_for_cuda_moe_gemm",
        "quantize_matmul_2bits",
        "quantize_matmul_4bits",
        "quantize_matmul_8bits",
        "quantize_matmul_bnb4",
        "quantize_qdq_matmul_2bits",
        "quantize_qdq_matmul_4bits",
    }
)


def __getattr__(name: str) -> Any:
    """The weight-packing helpers (`quantize_matmul_4bits`, ...), imported on first read."""
    if name in _WEIGHT_PACKING_NAMES:
        return getattr(importlib.import_module(WEIGHT_PACKING), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


kNextPowerOfTwo = ArenaExtendStrategy.kNextPowerOfTwo
kSameAsRequested = ArenaExtendStrategy.kSameAsRequested


def set_default_logger_severity(level: int) -> None:
    """onnxruntime's severity: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal."""
    logs.set_severity(level)


def set_default_logger_verbosity(level: int) -> None:
    logs.set_verbosity(level)


def has_collective_ops() -> bool:
    """False: turnout has no collective (multi-process communication) ops, as a CPU build."""
    return False


@dataclass(frozen=True)
class SessionObjectInitializer:
    """onnxruntime's default-argument marker for a session's options and logging."""


def get_default_session_options() -> SessionOptions:
    return SessionOptions()


def get_session_initializer() -> SessionObjectInitializer:
    return SessionObjectInitializer()


def get_all_operator_schema() -> list[onnx.defs.OpSchema]:
    """Every operator schema turnout knows: onnx's, in all versions (plus registered domains)."""
    return list(onnx.defs.get_all_schemas_with_history())


@dataclass(frozen=True)
class KernelDef:
    """A kernel the CPU provider registers: op, domain, opset range and type constraints."""

    op_name: str
    domain: str
    provider: str
    version_range: tuple[int, int]
    type_constraints: dict[str, list[str]]


_OPEN_END = 2**31 - 1  # onnxruntime's "no upper opset bound"


def get_all_opkernel_def() -> list[KernelDef]:
    """The CPU provider's own kernels (ops it runs through onnx.reference have none)."""
    from turnout.providers.cpu.registry import CPU_KERNELS

    return _kernel_defs(CPU_KERNELS)


def get_registered_ep_kernel_defs(ep_name: str) -> list[KernelDef]:
    """The kernels provider `ep_name` registers in its `KernelTable`, one per opset range (its
    fused groups and compiled subgraphs have none). The provider must be available here."""
    from turnout.sdk.plugins import registry

    factory = registry.resolve(ep_name)
    avail = registry.probe(factory)
    if not avail.ok:
        raise InvalidArgument(f"{factory.name} is not available here: {avail.reason}")
    return _kernel_defs(provider_for(factory, {}).kernels)


def _kernel_defs(table: KernelTable) -> list[KernelDef]:
    from turnout.graph.dtypes import type_string

    out = []
    for domain, op in table.ops():
        seen: list[Any] = []
        for version in range(1, onnx.defs.onnx_opset_version() + 1):
            d = table.lookup(domain, op, version)
            if d is not None and all(d is not s for s in seen):
                seen.append(d)
        for i, d in enumerate(seen):
            end = d.until if d.until is not None else _OPEN_END
            if d.until is None and i + 1 < len(seen):
                end = seen[i + 1].since - 1
            types_ = {k: sorted(type_string(t) for t in v) for k, v in (d.dtypes or {}).items()}
            out.append(KernelDef(op, domain, table.provider_name, (d.since, end), types_))
    return out


opkernel = types.ModuleType(f"{__name__}.opkernel", "Kernel definitions (`KernelDef`).")
setattr(opkernel, "KernelDef", KernelDef)  # noqa: B010 - a module object built at import
schemadef = types.ModuleType(f"{__name__}.schemadef", "Operator schemas (`OpSchema`).")
setattr(schemadef, "OpSchema", onnx.defs.OpSchema)  # noqa: B010
