"""ExecutionProvider: one per session; it claims nodes, builds their kernels and compiles groups.

Hooks a provider implements, and what turnout does with them:

| hook | required | called |
|---|---|---|
| `kernels` (a `KernelTable`) | to run single nodes | matched by the default `_get_capability` |
| `_get_capability(graph)` | no | once per (sub)graph at creation, through `get_capability` |
| `fused_groups(graph, claims)` | no (`compiles = True` only) | after `_get_capability` |
| `compile_subgraphs(subgraphs)` | when `compiles = True` | once per session for its groups |
| `on_run_start()`, `on_run_end()` | no | around every run |
| `kernel_context()` | no | when kernels are built |
| `supports_fused_op(...)` | no | by optimizer fusions |
| `compatibility_info`, `export_compiled`, `import_compiled` | no | by compiled models |
| `set_dynamic_option(name, value)` | for `dynamic` options | `set_ep_dynamic_options` |

A method with an underscore is wrapped by a public one that checks and names errors; the
others turnout calls directly. `compiles` is a declared flag: turnout never looks at whether a
method was overridden, and a class whose flag and methods disagree fails when it is defined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from turnout.graph.errors import EPFail, InvalidArgument
from turnout.sdk.ep.capability import (
    Capability,
    CompiledState,
    Decline,
    FusedSubgraph,
    merge_fused,
)
from turnout.sdk.ep.device import CPU, Device
from turnout.sdk.ep.flags import check_flag
from turnout.sdk.ep.kernels import KernelContext, KernelNode, KernelTable
from turnout.sdk.ep.memory import Allocator, DataTransfer, Stream

if TYPE_CHECKING:
    from turnout.graph.ir import GraphView
    from turnout.sdk.ep.factory import ProviderFactory

__all__ = ["ExecutionProvider"]


class ExecutionProvider:
    """One provider instance per session: `kernels` for single nodes, and with `compiles =
    True` the groups it fuses (`fused_groups`) and compiles (`compile_subgraphs`)."""

    name: str = "ExecutionProvider"
    device: Device = CPU
    compiles: bool = False
    """True for a provider that compiles fused groups: it implements `compile_subgraphs`, and
    names its groups in `fused_groups` (or claims them itself in `_get_capability`)."""
    fuse: bool = True
    """Whether `fused_groups` is asked (a provider sets it from an option such as `fuse`)."""
    kernel_source: str = "kernel"
    """What the partition report says ran a node claimed from `kernels` (turnout-numba:
    "numba", beside the "numpy" kernels it claims in `_claim_unmatched`)."""
    preferred_layout: str = "NCHW"
    """The data layout this provider's Conv-like kernels want: "NCHW" (ONNX's, the default) or
    "NHWC". With "NHWC", each layout-sensitive node that this provider would run, and whose
    channels-last variant it registers (`turnout.optimizer.layout.NHWC_OPS`: Conv becomes
    `ai.turnout::NhwcConv`, ...), reaches it as that variant with channels-last data; the
    optimizer puts transposes only where a chain of such nodes begins and ends."""
    stream: Stream | None = None
    """The provider's `Stream`, or None for a provider whose work is done when a call returns
    (the default). Kernels see it as `KernelContext.stream`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_flag(cls, ExecutionProvider, "compiles", ("compile_subgraphs",))

    def __init__(
        self,
        options: Mapping[str, Any] | None = None,
        factory: ProviderFactory | None = None,
        device_id: int = 0,
    ) -> None:
        """`factory`: the factory creating this provider. Its `name` and `device(device_id)`
        become the provider's, and the allocator and transfer are the factory's for that
        device, so the device is declared once. Without a factory (a contract-1 provider) the
        class declares `name` and `device` itself and gets host memory."""
        if factory is not None:
            self.name = factory.name
            self.device = factory.device(device_id)
        self.options: dict[str, Any] = dict(options or {})
        self.requested_options: dict[str, Any] = dict(self.options)
        """The options the session asked for (`get_provider_options()`), before defaults."""
        if getattr(type(self), "kernels", None) is None:
            self.kernels = KernelTable(self.name)
        self._factory = factory
        self._allocator: Allocator | None = None
        self._data_transfer: DataTransfer | None = None

    kernels: KernelTable
    """The provider's kernels for single nodes: a class attribute (a module-level table) or
    set in `__init__`; an empty table named after the provider by default."""

    @property
    def allocator(self) -> Allocator:
        """The factory's allocator for this provider's device, made on first use; a provider
        whose memory belongs to its session (its own context) assigns its own."""
        if self._allocator is None:
            factory = self._factory
            made = factory.create_allocator(self.device) if factory else Allocator(self.device)
            self._allocator = made
        return self._allocator

    @allocator.setter
    def allocator(self, value: Allocator) -> None:
        self._allocator = value

    @property
    def data_transfer(self) -> DataTransfer:
        """The factory's transfer for this provider's device, made on first use (assignable,
        as `allocator` is)."""
        if self._data_transfer is None:
            factory = self._factory
            made = (
                factory.create_data_transfer(self.device) if factory else DataTransfer(self.device)
            )
            self._data_transfer = made
        return self._data_transfer

    @data_transfer.setter
    def data_transfer(self, value: DataTransfer) -> None:
        self._data_transfer = value

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

    # -- capability --------------------------------------------------------------------------
    def get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        """Claims over `graph`'s still-unassigned nodes, and declines with reasons.

        Called once per (sub)graph at session creation, in provider priority order: the
        provider's `_get_capability`, then, for a provider that compiles, its `fused_groups`
        merged over the single-node claims.
        """
        claims, declines = self._get_capability(graph)
        if not (self.compiles and self.fuse):
            return claims, declines  # a contract-1 provider's own fused claims stay as made
        singles = [c for c in claims if not c.fused]
        try:
            return merge_fused(claims, self.fused_groups(graph, singles)), declines
        except ValueError as e:
            raise EPFail(f"{self.name}: {e}") from None

    def _get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        """The default claims every node that `kernels` matches, one node per claim."""
        claims: list[Capability] = []
        declines: list[Decline] = []
        for node in graph.unassigned_nodes():
            kn = graph.kernel_node(node)
            d, reason = self.kernels.match(kn)
            if d is not None:
                claims.append(Capability((node.name,), d, source=self.kernel_source))
                continue
            fallback = self._claim_unmatched(kn, reason or "declined")
            if isinstance(fallback, Capability):
                claims.append(fallback)
            else:
                declines.append(Decline(node.name, fallback))
        return claims, declines

    def _claim_unmatched(self, node: KernelNode, reason: str) -> Capability | str:
        """A node the table has no kernel for: claim it some other way, or say why not.

        The default declines with the table's reason; the CPU provider claims the node for
        onnx.reference here.
        """
        return reason

    # -- compile -----------------------------------------------------------------------------
    def fused_groups(
        self, graph: GraphView, claims: Sequence[Capability]
    ) -> Mapping[str, Sequence[str]]:
        """The groups this provider fuses among its single-node `claims`: group name ->
        member node names in graph order (`turnout.sdk.fusion` finds connected elementwise
        chains). Each group reaches `compile_subgraphs` as one `FusedSubgraph`."""
        return {}

    def compile_subgraphs(self, subgraphs: Sequence[FusedSubgraph]) -> list[CompiledState]:
        """Compile fused groups, each given as a subgraph (nodes, typed boundary, constants):
        one `CompiledState` per subgraph, in the same order."""
        raise NotImplementedError

    # -- runs --------------------------------------------------------------------------------
    def on_run_start(self) -> None:
        """Called before each run (device providers: pick a stream)."""

    def on_run_end(self) -> None:
        """Called after each run, also after a failed one (device providers: synchronize)."""
