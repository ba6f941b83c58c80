"""The provider contract: everything a provider author needs, split by concern.

- `device`: `Device`, `DeviceEntry`, `Availability` (where values live; what `probe()` says);
- `kernels`: `KernelTable`, `KernelDef`, `KernelNode`, `KernelContext`, `KernelFn`;
- `capability`: `Capability`, `Decline`, `FusedSubgraph`, `CompiledState` (claims and compile);
- `memory`: `Allocator`, `DataTransfer`, `Stream`, `Event` (buffers, copies, device queues);
- `provider`: `ExecutionProvider`, one per session;
- `factory`: `ProviderFactory`, what a plugin registers;
- `legacy`: contract 1, so that old providers still load.

Required: a factory's `name` and `_create`; with `compiles = True` a provider's
`fused_groups` and `compile_subgraphs`; for a device other than the host, the factory's
`create_allocator` and `create_data_transfer`. Everything else has a working default.
Import from here (`turnout.ep` is the same package); `turnout.provider` re-exports it.
"""

from __future__ import annotations

from turnout.sdk.ep.capability import (
    Capability,
    CompiledKernel,
    CompiledState,
    Decline,
    FusedSubgraph,
    merge_fused,
)
from turnout.sdk.ep.device import CPU, Availability, Device, DeviceEntry
from turnout.sdk.ep.factory import CONTRACT_VERSION, SUPPORTED_CONTRACTS, ProviderFactory
from turnout.sdk.ep.kernels import (
    KernelContext,
    KernelDef,
    KernelFactory,
    KernelFn,
    KernelNode,
    KernelRegistry,
    KernelTable,
    SupportsFn,
)
from turnout.sdk.ep.memory import COMPLETE, Allocator, DataTransfer, Event, Stream
from turnout.sdk.ep.provider import ExecutionProvider
from turnout.sdk.provider_options import ProviderOption

__all__ = [
    "COMPLETE",
    "CONTRACT_VERSION",
    "CPU",
    "SUPPORTED_CONTRACTS",
    "Allocator",
    "Availability",
    "Capability",
    "CompiledKernel",
    "CompiledState",
    "DataTransfer",
    "Decline",
    "Device",
    "DeviceEntry",
    "Event",
    "ExecutionProvider",
    "FusedSubgraph",
    "KernelContext",
    "KernelDef",
    "KernelFactory",
    "KernelFn",
    "KernelNode",
    "KernelRegistry",
    "KernelTable",
    "ProviderFactory",
    "ProviderOption",
    "Stream",
    "SupportsFn",
    "merge_fused",
]
