"""The execution-provider contract: the first file a provider author reads.

A provider package registers a `ProviderFactory` (through the `turnout_providers` hook). For each
session the factory creates one `ExecutionProvider`. The session hands the provider a read-only
`GraphView`; the provider answers with `Capability` objects (single nodes run by a registered
kernel, or fused groups that it compiles) and with declines that carry a reason. Everything a
provider must implement is an underscore method; the public methods here validate and wrap.

Kernels are declared, not discovered: `KernelRegistry.register(op_type, since=..., domain=...)`
decorates a *kernel factory*. At session creation the factory is called once per node with a
`KernelNode` (attributes already decoded, input/output types known where inference found them) and
returns the *kernel function*: `fn(*inputs) -> tuple(outputs)`. Missing optional inputs arrive
as `None`; the tuple has one entry per node output (an entry for an unnamed output is ignored).
Work that depends only on attributes belongs in the factory, so the kernel function stays lean.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from turnout.graph import errors
from turnout.graph.errors import EPFail, InvalidArgument
from turnout.graph.ir import KernelNode
from turnout.sdk.provider_options import ProviderOption

if TYPE_CHECKING:
    from turnout.graph.ir import GraphView, Node

CONTRACT_VERSION = 2
"""The provider contract of this turnout. 2 added typed options (`ProviderOption`), devices
declared once (`ProviderFactory.device_type`, with their hardware type in `probe()`), memory
through the provider's allocator (`KernelContext.allocate`, `Allocator.free`), optional streams
and events, and batched copies (`DataTransfer.copy_tensors`); a version-1 provider (untyped
`option_names`, its own `name` and `device`) still loads."""
SUPPORTED_CONTRACTS = frozenset({1, 2})

__all__ = [
    "CONTRACT_VERSION",
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
    "KernelFn",
    "KernelNode",
    "KernelRegistry",
    "ProviderFactory",
    "Stream",
]

KernelFn = Callable[..., Sequence[Any]]
"""A kernel function: positional input values in, a tuple with one value per node output out.

One per entry of `node.outputs`, exactly: a node may leave its trailing optional outputs out
(return fewer, `outs[: len(node.outputs)]`) and blank others to "" (that slot's value is
dropped; None will do). tests/core/test_optional_outputs.py holds every provider to it."""


@dataclass(frozen=True)
class Device:
    """Where a value lives: `Device("cpu")`, `Device("cuda", 1)`, `Device("opencl", 0)`."""

    type: str = "cpu"
    id: int = 0

    def __str__(self) -> str:
        return self.type if self.type == "cpu" else f"{self.type}:{self.id}"


CPU = Device("cpu", 0)


@dataclass(frozen=True)
class DeviceEntry:
    """One device a provider can run on, as `probe()` lists it (like ORT's EP-device entries)."""

    device: Device
    metadata: Mapping[str, str] = field(default_factory=dict)
    default_options: Mapping[str, Any] = field(default_factory=dict)
    hardware_type: str | None = None
    """"cpu", "gpu" or "npu" for a device that is not the host (an OpenCL device on PoCL is a
    CPU); `get_ep_devices()` and the selection policies read it. None: a GPU."""
    vendor: str = ""
    vendor_id: int = 0
    """The hardware vendor and its PCI vendor id, where the provider knows them."""


@dataclass(frozen=True)
class Availability:
    """`probe()`'s answer: whether the provider can run here, on what, and if not, exactly why."""

    ok: bool
    devices: tuple[DeviceEntry, ...] = ()
    reason: str | None = None
    version: str | None = None


# --------------------------------------------------------------------------------------------
# Kernels


@dataclass(frozen=True)
class KernelContext:
    """What a kernel may use besides its node, handed over instead of kept in globals: the
    session's provider (its name), its options as parsed, the thread count it was given (0:
    its default), its allocator and data transfer, a stream (None for providers without
    streams) and the logger to report through.

    A kernel asks for its output buffers with `allocate(shape, dtype)` rather than allocating
    them itself, so they come from the provider's allocator (a device pool) and go back to it
    when the plan says they are dead."""

    provider: str
    options: Mapping[str, Any]
    threads: int
    allocator: Allocator
    data_transfer: DataTransfer
    logger: logging.Logger
    stream: Stream | None = None

    def allocate(self, shape: Sequence[int], dtype: Any) -> Any:
        """A new, uninitialized buffer of `shape` and `dtype` from the provider's allocator."""
        return self.allocator.empty(tuple(shape), np.dtype(dtype))


KernelFactory = Callable[[KernelNode], KernelFn]
SupportsFn = Callable[[KernelNode], "str | None"]


@dataclass(frozen=True)
class KernelDef:
    """A declared kernel: which op, which opset range, which dtypes, and its factory.

    `dtypes` maps schema type-parameter names (like "T") to the allowed ONNX element types;
    `supports(node)` returns a reason string to decline a node (attribute or shape limits).
    `host_inputs`/`host_outputs` list input/output indices that stay in host memory even on a
    device provider (shape-like tensors), so copy insertion can honour them.
    """

    op_type: str
    domain: str
    since: int
    factory: KernelFactory
    until: int | None = None
    dtypes: Mapping[str, frozenset[int]] | None = None
    supports: SupportsFn | None = None
    host_inputs: tuple[int, ...] = ()
    host_outputs: tuple[int, ...] = ()


class KernelRegistry:
    """Op-by-op kernels of one provider, keyed by (domain, op type), sorted by since-version."""

    def __init__(self, provider_name: str) -> None:
        self.provider_name = provider_name
        self._defs: dict[tuple[str, str], list[KernelDef]] = {}

    def register(
        self,
        op_type: str,
        since: int = 1,
        *,
        domain: str = "",
        until: int | None = None,
        dtypes: Mapping[str, Iterable[int]] | None = None,
        supports: SupportsFn | None = None,
        host_inputs: tuple[int, ...] = (),
        host_outputs: tuple[int, ...] = (),
    ) -> Callable[[KernelFactory], KernelFactory]:
        """Decorator: register `factory` for `op_type` from opset `since` (to `until`)."""

        def deco(factory: KernelFactory) -> KernelFactory:
            d = KernelDef(
                op_type=op_type,
                domain=domain,
                since=since,
                factory=factory,
                until=until,
                dtypes={k: frozenset(v) for k, v in dtypes.items()} if dtypes else None,
                supports=supports,
                host_inputs=host_inputs,
                host_outputs=host_outputs,
            )
            defs = self._defs.setdefault((domain, op_type), [])
            if any(x.since == since for x in defs):
                raise ValueError(
                    f"{self.provider_name}: kernel {domain or 'ai.onnx'}::{op_type} "
                    f"since {since} registered twice"
                )
            defs.append(d)
            defs.sort(key=lambda x: x.since)
            return factory

        return deco

    def ops(self) -> list[tuple[str, str]]:
        """(domain, op_type) pairs that have at least one kernel."""
        return sorted(self._defs)

    def lookup(self, domain: str, op_type: str, since_version: int) -> KernelDef | None:
        """The kernel whose since is the highest not above the node's schema `since_version`."""
        best = None
        for d in self._defs.get((domain, op_type), ()):
            if d.since <= since_version and (d.until is None or since_version <= d.until):
                best = d
        return best

    def match(self, kn: KernelNode) -> tuple[KernelDef | None, str | None]:
        """(kernel, None) when a kernel runs this node, else (None, reason)."""
        d = self.lookup(kn.domain, kn.op_type, kn.since_version)
        if d is None:
            if (kn.domain, kn.op_type) in self._defs:
                have = ", ".join(str(x.since) for x in self._defs[(kn.domain, kn.op_type)])
                return None, f"no kernel for opset version {kn.since_version} (have since {have})"
            return None, f"no kernel for {kn.domain or 'ai.onnx'}::{kn.op_type}"
        if d.dtypes:
            reason = _check_dtypes(kn, d.dtypes)
            if reason:
                return None, reason
        if d.supports is not None:
            reason = d.supports(kn)
            if reason:
                return None, reason
        return d, None


def _check_dtypes(kn: KernelNode, allowed: Mapping[str, frozenset[int]]) -> str | None:
    """Check the node's known input/output element types against the type parameters."""
    from turnout.graph.ir import schema_type_params

    params = schema_type_params(kn.domain, kn.op_type, kn.opset)
    infos = list(kn.inputs) + list(kn.outputs)
    for info, param in zip(infos, params[0] + params[1]):
        if info is None or param not in allowed or info.elem_type is None:
            continue
        if info.elem_type not in allowed[param]:
            from turnout.graph.dtypes import ELEM_TYPE_NAMES

            name = ELEM_TYPE_NAMES.get(info.elem_type, str(info.elem_type))
            return f"dtype {name} of {info.name!r} not supported for {param}"
    return None


# --------------------------------------------------------------------------------------------
# Capabilities and compilation


@dataclass(frozen=True)
class Decline:
    """A node the provider will not run, and why (shown in the partition report)."""

    node: str
    reason: str


@dataclass(frozen=True)
class Capability:
    """A claim: one node run by `kernel`, or several nodes fused and compiled (`kernel` None)."""

    nodes: tuple[str, ...]
    kernel: KernelDef | None = None
    name: str | None = None
    source: str = "kernel"

    @property
    def fused(self) -> bool:
        return self.kernel is None


@dataclass
class CompiledKernel:
    """`compile()`'s result for one fused group: a kernel function over the group's boundary."""

    name: str
    fn: KernelFn
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class FusedSubgraph:
    """One fused group as `compile_subgraphs` gets it: its nodes in graph order, the values
    crossing its boundary with their types and shapes, and the initializers among its inputs
    that no feed can replace (the provider may keep them on its device: onnxruntime's
    drop_constant_initializers). The graph a provider sees is the optimized one."""

    name: str
    nodes: tuple[Node, ...]
    inputs: tuple[Any, ...]  # ir.ValueInfo of each boundary input, in first-read order
    outputs: tuple[Any, ...]  # ir.ValueInfo of each value read outside, or a graph output
    constants: Mapping[str, Any]
    view: GraphView

    def kernel_node(self, node: Node) -> KernelNode:
        """The `KernelNode` of a member (its types and schema version), for a kernel
        registry to match and build."""
        return self.view.kernel_node(node)


@dataclass(frozen=True)
class CompiledState:
    """`compile_subgraphs`' answer for one group, in onnxruntime's compiled-node shape:
    `create()` makes the group's state once (device buffers, a compiled program), `compute(
    state, *inputs)` runs it and returns one value per output, `release(state)` frees what
    `create` made when the session goes away."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    compute: Callable[..., tuple[Any, ...]]
    create: Callable[[], Any] = field(default=lambda: None)
    release: Callable[[Any], None] = field(default=lambda state: None)


# --------------------------------------------------------------------------------------------
# Memory


class Allocator:
    """A provider's buffers on its device. The CPU one hands out numpy arrays.

    turnout allocates through it: `KernelContext.allocate` (a kernel's outputs) and the copy
    steps (the destination of a batched copy) call `empty`, and the plan calls `free` on each
    such value once its last reader has run (a graph output is never freed). An allocator that
    pools overrides `_free` to take the buffer back; the default leaves it to the garbage
    collector. A freed value may still share memory with a live one (a kernel that returned its
    input or a view of it), so a pool reuses memory only once nothing references it: a pool of
    Python objects gets a buffer back when the last array over it is dropped."""

    device: Device = CPU

    def __init__(self, device: Device | None = None) -> None:
        if device is not None:
            self.device = device

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return self._empty(tuple(int(s) for s in shape), np.dtype(dtype))

    def free(self, value: Any) -> None:
        """Hand back a value the runtime no longer holds; values this allocator did not make
        (a feed, another provider's array) must be ignored."""
        self._free(value)

    @property
    def pools(self) -> bool:
        """True when the allocator takes buffers back (`_free` overridden): only then does the
        plan call `free`, so allocators without a pool cost nothing per value."""
        return type(self)._free is not Allocator._free

    def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return np.empty(shape, dtype)

    def _free(self, value: Any) -> None:
        pass


class Event:
    """A point in a stream's work (onnxruntime's notification): `wait()` blocks the host until
    the work enqueued before it is done. This base is always complete: work on a provider
    without streams is done when its call returns."""

    def wait(self) -> None:
        """Block the host until the work before this event is done."""


class Stream:
    """An ordered queue of one provider's device work (onnxruntime's sync stream); optional.

    A provider that has one sets `ExecutionProvider.stream`; its kernels find it in
    `KernelContext.stream` and enqueue on it, and its transfer's `copy_tensors` may enqueue
    copies on it without waiting. Wherever a value crosses to another provider, turnout records
    an event on the stream that made it and, before the consumer runs, waits for it: on the
    consumer's stream (`wait_event`) when the consumer has one, else on the host."""

    def __init__(self, device: Device = CPU) -> None:
        self.device = device

    @property
    def handle(self) -> Any:
        """The native object (an OpenCL command queue), for code that enqueues directly."""
        return None

    def record(self) -> Event:
        """An event that completes once the work enqueued so far on this stream is done."""
        return COMPLETE

    def wait_event(self, event: Event) -> None:
        """Make work enqueued on this stream from now on wait for `event`. The default blocks
        the host; a device that can wait on its own side overrides it."""
        event.wait()

    def synchronize(self) -> None:
        """Block the host until everything enqueued on this stream is done."""


COMPLETE = Event()


class DataTransfer:
    """Copies between host memory and the provider's device (and between its devices)."""

    device: Device = CPU

    def __init__(self, device: Device | None = None) -> None:
        if device is not None:
            self.device = device

    def to_device(self, value: Any, device: Device) -> Any:
        return self._to_device(value, device)

    def to_host(self, value: Any) -> np.ndarray:
        return self._to_host(value)

    def is_device_value(self, value: Any) -> bool:
        """True when `value` already lives on this provider's device (no copy needed)."""
        return isinstance(value, np.ndarray)

    def copy_tensors(self, pairs: Sequence[tuple[Any, Any]], stream: Stream | None = None) -> None:
        """Copy each source tensor into its destination (same shape and dtype; each side host
        memory or this provider's device), like onnxruntime's `CopyTensors`. A transfer with a
        stream may only enqueue the copies: the caller records an event on `stream` and waits
        for it before reading a destination. The default copies one pair at a time and
        synchronously (`_copy_into`)."""
        for src, dst in pairs:
            self._copy_into(src, dst)

    @property
    def batched(self) -> bool:
        """True when the transfer copies into buffers turnout allocates (`copy_tensors` or
        `_copy_into` overridden): copy steps then allocate each destination from the receiving
        side's allocator and hand a whole batch to one `copy_tensors` call."""
        cls = type(self)
        return (
            cls.copy_tensors is not DataTransfer.copy_tensors
            or cls._copy_into is not DataTransfer._copy_into
        )

    def _copy_into(self, src: Any, dst: Any) -> None:
        """One synchronous copy of `src` into `dst`. The default writes host destinations
        only; a device provider overrides it (or `copy_tensors`) to write its own buffers."""
        if not isinstance(dst, np.ndarray):
            raise errors.NotImplemented(
                f"{type(self).__name__} cannot copy into a {type(dst).__name__}: the provider "
                "implements neither copy_tensors nor _copy_into"
            )
        np.copyto(dst, self.to_host(src) if self.is_device_value(src) else np.asarray(src))

    def _to_device(self, value: Any, device: Device) -> Any:
        return value

    def _to_host(self, value: Any) -> np.ndarray:
        return value  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------
# Provider and factory


class ExecutionProvider:
    """One provider instance per session. Subclasses fill `kernels` and may override
    `compile_subgraphs`."""

    name: str = "ExecutionProvider"
    device: Device = CPU
    preferred_layout: str = "NCHW"
    """The data layout this provider's Conv-like kernels want: "NCHW" (ONNX's, the default) or
    "NHWC". With "NHWC", each layout-sensitive node that this provider would run, and whose
    channels-last variant it registers (`turnout.optimizer.layout.NHWC_OPS`: Conv becomes
    `ai.turnout::NhwcConv`, ...), reaches it as that variant with channels-last data; the
    optimizer puts transposes only where a chain of such nodes begins and ends."""
    stream: Stream | None = None
    """The provider's `Stream`, or None for a provider whose work is done when a call returns
    (the default). Kernels see it as `KernelContext.stream`."""

    def __init__(
        self,
        options: Mapping[str, Any] | None = None,
        factory: ProviderFactory | None = None,
        device_id: int = 0,
    ) -> None:
        """`factory`: the factory creating this provider; its `name` and `device(device_id)`
        become the provider's, and the default allocator and transfer are on that device, so
        the device is declared once (contract 2). Without it the class declares `name` and
        `device` itself (contract 1)."""
        if factory is not None:
            self.name = factory.name
            self.device = factory.device(device_id)
        self.options: dict[str, Any] = dict(options or {})
        self.requested_options: dict[str, Any] = dict(self.options)
        """The options the session asked for (`get_provider_options()`), before defaults."""
        self.kernels = KernelRegistry(self.name)
        self.allocator = Allocator(self.device)
        self.data_transfer = DataTransfer(self.device)

    def kernel_context(self) -> KernelContext:
        """The context this provider's kernels are built with (see `KernelContext`); a
        provider with streams or its own logger overrides it."""
        from turnout.graph.logs import logger

        return KernelContext(
            provider=self.name,
            options=dict(self.options),
            threads=int(self.options.get("intra_op_num_threads", 0) or 0),
            allocator=self.allocator,
            data_transfer=self.data_transfer,
            logger=logger,
            stream=self.stream,
        )

    def supports_fused_op(self, domain: str, op_type: str, since_version: int) -> bool:
        """Whether this provider runs `domain::op_type` (schema `since_version`), the fused op
        an optimizer pass would write over nodes this provider takes: the fusion fires only
        then. The default asks `kernels`; a provider that serves ops another way (generated
        kernels, a table of its own) overrides it, or the fusions only it runs never fire."""
        return self.kernels.lookup(domain, op_type, since_version) is not None

    # -- compiled artifacts (turnout compile / ModelCompiler) --------------------------------
    def compatibility_info(self) -> str:
        """What this provider's compiled code depends on (its version, the device, the options
        that shape the code). A compiled model records it; loading one whose string differs
        fails instead of running stale code. "" for a provider that compiles nothing."""
        return ""

    def export_compiled(self) -> dict[str, bytes]:
        """The blobs this session's compiled kernels are made of (named files), for a compiled
        model; empty when there is nothing to keep."""
        return {}

    def import_compiled(self, blobs: Mapping[str, bytes]) -> None:
        """Take the blobs of a compiled model before this session's kernels are built, so that
        building them compiles nothing. Called only after `compatibility_info()` matched."""

    def set_dynamic_option(self, name: str, value: Any) -> None:
        """Apply a `dynamic` option between runs (`set_ep_dynamic_options`); a provider that
        declares one overrides this. `value` is already parsed to the option's type."""
        raise InvalidArgument(f"{self.name}: option {name!r} cannot change after creation")

    def get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        """Claims over `graph`'s still-unassigned nodes, and declines with reasons.

        The default claims every node that the kernel registry matches, one node per claim.
        Called once per (sub)graph at session creation, in provider priority order.
        """
        return self._get_capability(graph)

    def _get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        claims: list[Capability] = []
        declines: list[Decline] = []
        for node in graph.unassigned_nodes():
            kn = graph.kernel_node(node)
            d, reason = self.kernels.match(kn)
            if d is not None:
                claims.append(Capability((node.name,), d))
                continue
            fallback = self._claim_unmatched(kn, reason or "declined")
            if isinstance(fallback, Capability):
                claims.append(fallback)
            else:
                declines.append(Decline(node.name, fallback))
        return claims, declines

    def _claim_unmatched(self, node: KernelNode, reason: str) -> Capability | str:
        """A node the registry has no kernel for: claim it some other way, or say why not.

        The default declines with the registry's reason; the CPU provider claims the node for
        onnx.reference here.
        """
        return reason

    def compile(self, groups: Sequence[tuple[Capability, GraphView]]) -> list[CompiledKernel]:
        """Deprecated (contract 1): compile fused groups, each a `Capability` with the whole
        graph's `GraphView`, into kernel functions. turnout calls it only for a provider that
        does not override `compile_subgraphs`, so that contract-1 providers still load; new
        providers implement `compile_subgraphs`, which gets each group's boundary."""
        if not groups:
            return []
        warnings.warn(
            f"{self.name} compiles through the deprecated contract-1 _compile(groups); "
            "implement compile_subgraphs(subgraphs) instead",
            DeprecationWarning,
            stacklevel=2,
        )
        try:
            return self._compile(groups)
        except Exception as e:  # a compiler bug must name the provider
            raise EPFail(f"{self.name}: compile failed: {e}") from e

    def _compile(self, groups: Sequence[tuple[Capability, GraphView]]) -> list[CompiledKernel]:
        """Deprecated: the contract-1 compile that `compile` wraps."""
        raise EPFail(f"{self.name} claimed fused groups but does not implement _compile")

    def compile_subgraphs(self, subgraphs: Sequence[FusedSubgraph]) -> list[CompiledState]:
        """Compile fused groups given as subgraphs (nodes, typed boundary, constants): the
        contract-2 form of `compile`. turnout calls it instead of `compile` when a provider
        overrides it; one `CompiledState` per subgraph, same order."""
        raise NotImplementedError

    def uses_compile_subgraphs(self) -> bool:
        return type(self).compile_subgraphs is not ExecutionProvider.compile_subgraphs

    def on_run_start(self) -> None:
        """Called before each run (device providers: pick a stream)."""

    def on_run_end(self) -> None:
        """Called after each run, also after a failed one (device providers: synchronize)."""


class ProviderFactory:
    """What a plugin registers: a name, aliases, priority, probe() and create(options)."""

    name: str = "ExecutionProvider"
    aliases: tuple[str, ...] = ()
    default_priority: int = 0
    contract_version: int = 1
    """The provider contract this factory implements (`turnout.sdk.provider.CONTRACT_VERSION` is
    the newest). A version this turnout does not support keeps the provider from loading,
    with the reason in `turnout providers`."""
    option_names: frozenset[str] = frozenset()
    """Keys `create` accepts. A factory that declares typed `options` gets their names here."""
    options: tuple[ProviderOption, ...] = ()
    """Typed options (name, type, default, doc): `create` parses each given value and fills
    the defaults, so `_create` sees every declared option with a value of its type."""
    version: str | None = None
    vendor: str = ""
    """Who makes the provider (`OrtEpDevice.ep_vendor`)."""
    device_type: str = "cpu"
    """The `Device.type` its values live on; OrtValues for that device type use its transfer.
    The one declaration of the device: `device(i)` builds the provider's, its allocator's, its
    transfer's and its probe entries' `Device` from it."""
    serves_cpu_requests: bool = False
    """A host provider: when a session asks for `CPUExecutionProvider` (by name, by default, or
    as the implicit fallback), turnout places this provider ahead of the numpy kernels, so that
    applications which hardcode the CPU provider get the fastest host kernels. The session
    passes it `intra_op_num_threads` from `SessionOptions` when it takes that option."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "options" in cls.__dict__:
            cls.option_names = frozenset(cls.option_names) | {o.name for o in cls.options}

    def probe(self) -> Availability:
        """Whether this provider can run here; never raises (a failure is a reason)."""
        try:
            return self._probe()
        except Exception as e:
            return Availability(False, reason=f"probe failed: {type(e).__name__}: {e}")

    def _probe(self) -> Availability:
        return Availability(True, (DeviceEntry(CPU),), version=self.version)

    def create(self, options: Mapping[str, Any] | None = None) -> ExecutionProvider:
        """A provider for one session; unknown option keys are an `InvalidArgument`."""
        opts = {str(k): v for k, v in (options or {}).items()}
        unknown = sorted(set(opts) - set(self.option_names))
        if unknown:
            valid = ", ".join(sorted(self.option_names)) or "(none)"
            raise InvalidArgument(
                f"{self.name}: unknown provider option(s) {', '.join(unknown)}; valid: {valid}"
            )
        typed = {o.name: o.default for o in self.options}
        schema = {o.name: o for o in self.options}
        for key, raw in opts.items():
            typed[key] = schema[key].parse(self.name, raw) if key in schema else raw
        provider = self._create(typed)
        provider.requested_options = {k: typed[k] for k in opts}
        self._adopt(provider)
        return provider

    def device(self, device_id: int = 0) -> Device:
        """Device `device_id` of this factory's `device_type`, for probe entries and providers."""
        return Device(self.device_type, device_id)

    def _adopt(self, provider: ExecutionProvider) -> None:
        """Hold `provider` to the factory's declaration: it takes the factory's name when its
        class has none, an allocator or transfer that declares no device takes the provider's,
        and a contract-2 provider on another device type than `device_type` is refused."""
        if provider.name == ExecutionProvider.name:
            provider.name = provider.kernels.provider_name = self.name
        if self.contract_version < 2:
            return
        parts: dict[str, ExecutionProvider | Allocator | DataTransfer] = {
            "provider": provider,
            "allocator": provider.allocator,
            "data transfer": provider.data_transfer,
        }
        for what, part in parts.items():
            if part is not provider and part.device == CPU and "device" not in vars(part):
                part.device = provider.device
            if part.device.type != self.device_type:
                raise EPFail(
                    f"{self.name}: its {what} is on {part.device}, but the factory declares "
                    f"device_type {self.device_type!r}; build them from the factory "
                    "(ExecutionProvider(options, factory))"
                )

    def default_options(self) -> dict[str, Any]:
        """Every typed option's default (what a probe's `DeviceEntry` lists)."""
        return {o.name: o.default for o in self.options}

    def option(self, name: str) -> ProviderOption | None:
        """The typed declaration of option `name`, if the factory declares one."""
        return next((o for o in self.options if o.name == name), None)

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        raise NotImplementedError

    def data_transfer(self) -> DataTransfer:
        """Host <-> device copies outside a session (OrtValue creation, IO binding)."""
        return self.create({}).data_transfer

    def sync_stream(self) -> Stream | None:
        """A stream to enqueue `data_transfer()`'s copies on outside a session
        (`OrtEpDevice.create_sync_stream()`), or None for a provider without streams."""
        return None

    def expected_failures(self) -> Mapping[str, str]:
        """Conformance cases this provider is known to fail: case name or regex -> reason.

        A reviewed list shipped with the provider; the conformance runner fails on a listed
        case that passes (a stale entry), so the list only shrinks.
        """
        return {}
