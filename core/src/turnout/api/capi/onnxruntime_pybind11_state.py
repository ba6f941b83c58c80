"""`onnxruntime.capi.onnxruntime_pybind11_state`: the names of onnxruntime's native module.

In onnxruntime this module holds the whole native API (sessions, options, values, exceptions,
enums, environment functions). Here each name is turnout's own object: the session classes are
turnout's `InferenceSession`, `SessionOptions`, ... so code that imports them from here gets the
same classes as `import turnout`.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
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
from turnout.sdk.devices import parse_device, transfer_for
from turnout.sdk.provider import Device, Stream

__all__ = [
    "AdapterFormat",
    "ModelCompiler",
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


class OrtSyncStream:
    """A provider's stream as `OrtEpDevice.create_sync_stream()` hands it out: pass it to
    `copy_tensors` to enqueue a batch of copies on it. A provider without streams gives one
    with no stream (handle 0), whose copies are synchronous."""

    def __init__(self, stream: Stream | None = None, ep_name: str = "") -> None:
        self._stream = stream
        self._ep_name = ep_name

    def get_handle(self) -> int:
        """An integer naming the native stream (its queue's address), 0 for none."""
        handle = self._stream.handle if self._stream is not None else None
        return int(getattr(handle, "int_ptr", 0) or (id(handle) if handle is not None else 0))

    def __repr__(self) -> str:
        return f"OrtSyncStream({self._ep_name or 'no provider'}, handle={self.get_handle():#x})"


def copy_tensors(
    src: Sequence[OrtValue], dst: Sequence[OrtValue], stream: OrtSyncStream | None = None
) -> None:
    """Copy each tensor of `src` into the matching tensor of `dst`, in place. Shapes and element
    types must match. The pairs that touch one device go to its provider's transfer as one
    batch (`DataTransfer.copy_tensors`), enqueued on `stream` when one is given; the call
    returns once every copy has landed."""
    if len(src) != len(dst):
        raise InvalidArgument(
            f"copy_tensors: {len(src)} sources but {len(dst)} destinations; they must pair up"
        )
    for i, (s, d) in enumerate(zip(src, dst)):
        if s.shape() != d.shape() or s.element_type() != d.element_type():
            raise InvalidArgument(
                f"copy_tensors: pair {i}: source {s.data_type()}{s.shape()} does not match "
                f"destination {d.data_type()}{d.shape()}"
            )
    by_device: dict[str, list[tuple[OrtValue, OrtValue]]] = {}
    for s, d in zip(src, dst):
        if s._device == "cpu" and d._device == "cpu":
            np.copyto(d._tensor("copy_tensors"), s._tensor("copy_tensors"))
            continue
        if s._device not in ("cpu", d._device) and d._device != "cpu":
            s = OrtValue(s.numpy())  # between two devices: through the host
        by_device.setdefault(d._device if d._device != "cpu" else s._device, []).append((s, d))
    native = stream._stream if stream is not None else None
    for device, pairs in by_device.items():
        _copy_batch(parse_device(device), pairs, native)


def _copy_batch(
    device: Device, pairs: list[tuple[OrtValue, OrtValue]], stream: Stream | None
) -> None:
    """One device's pairs: one batched call, or one copy at a time on a contract-1 transfer
    (whose device destinations take a new buffer, since it cannot write into one)."""
    transfer = transfer_for(device.type)
    stream = stream if stream is not None and stream.device.type == device.type else None
    if transfer.batched:
        transfer.copy_tensors([(s._value, d._value) for s, d in pairs], stream)
        if stream is not None:
            stream.record().wait()
        return
    for s, d in pairs:
        if d._device == "cpu":
            np.copyto(d._tensor("copy_tensors"), transfer.to_host(s._value))
        else:
            d._v = transfer.to_device(s._value, device)


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
    from turnout.graph.dtypes import type_string
    from turnout.providers.cpu.registry import CPU_KERNELS

    out = []
    for domain, op in CPU_KERNELS.ops():
        seen: list[Any] = []
        for version in range(1, onnx.defs.onnx_opset_version() + 1):
            d = CPU_KERNELS.lookup(domain, op, version)
            if d is not None and all(d is not s for s in seen):
                seen.append(d)
        for i, d in enumerate(seen):
            end = d.until if d.until is not None else _OPEN_END
            if d.until is None and i + 1 < len(seen):
                end = seen[i + 1].since - 1
            types_ = {k: sorted(type_string(t) for t in v) for k, v in (d.dtypes or {}).items()}
            out.append(KernelDef(op, domain, CPU_KERNELS.provider_name, (d.since, end), types_))
    return out


opkernel = types.ModuleType(f"{__name__}.opkernel", "Kernel definitions (`KernelDef`).")
setattr(opkernel, "KernelDef", KernelDef)  # noqa: B010 - a module object built at import
schemadef = types.ModuleType(f"{__name__}.schemadef", "Operator schemas (`OpSchema`).")
setattr(schemadef, "OpSchema", onnx.defs.OpSchema)  # noqa: B010
