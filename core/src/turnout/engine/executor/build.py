"""From a partitioned graph to a Plan: instantiate kernels, compile fused groups, order steps.

Nested graphs (If/Loop/Scan bodies) are partitioned and planned the same way, on demand, when a
control-flow kernel asks its `KernelNode.subgraph(...)` for a runner.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from turnout.engine.executor.copies import HostIO, insert_copies
from turnout.engine.executor.plan import Plan, Step
from turnout.engine.partition import GraphPartition, PartitionReport, partition_graph
from turnout.graph.errors import EPFail, InvalidGraph, TurnoutError
from turnout.graph.ir import Graph, GraphView, schema_since_version
from turnout.graph.sparse import SparseTensor
from turnout.sdk.ep.legacy import compile_v1
from turnout.sdk.fusion import GraphIndex, group_inputs, group_outputs
from turnout.sdk.provider import (
    CPU,
    Capability,
    CompiledKernel,
    ExecutionProvider,
    FusedSubgraph,
    KernelNode,
)

__all__ = [
    "BoundRunner",
    "PreparedGraph",
    "SubgraphRunner",
    "build_plan",
    "compile_partition",
    "fused_subgraph",
    "prepare_graph",
]

SubgraphRunner = Callable[[Sequence[Any], dict[str, Any]], list[Any]]


@dataclass
class PreparedGraph:
    """A partitioned graph with its kernels built; `plan()` adds copies and compiles a Plan.

    Kept by the session so IO binding can ask for a variant that leaves outputs on device.
    """

    graph: Graph
    steps: list[Step]
    host_io: dict[str, HostIO]
    providers: dict[str, ExecutionProvider]
    constants: dict[str, Any]
    inputs: list[str]
    outer: list[str]
    outputs: list[str]
    report: PartitionReport

    def plan(self, device_outputs: frozenset[str] = frozenset(), release: bool = True) -> Plan:
        steps, constants, outputs, copies = insert_copies(
            self.steps,
            self.providers,
            self.host_io,
            self.constants,
            self.inputs + self.outer,
            self.outputs,
            device_outputs,
        )
        if not device_outputs:
            self.report.copies = [asdict(c) for c in copies]
        host = frozenset(n for n, ep in self.providers.items() if ep.device == CPU)
        return Plan(
            self.graph.name, steps, self.inputs, self.outer, outputs, constants, release, host
        )


def prepare_graph(
    graph: Graph,
    providers: Sequence[ExecutionProvider],
    reports: dict[str, PartitionReport],
    report_key: str = "",
    constants_override: dict[str, Any] | None = None,
    policy: Any = None,
) -> PreparedGraph:
    """Partition `graph` (by `policy`, a `turnout.engine.placement` policy; priority when
    None) and build its kernels (nested graphs are prepared on demand)."""
    part = (
        policy.place(graph, providers) if policy is not None else partition_graph(graph, providers)
    )
    return compile_partition(part, providers, reports, report_key, constants_override)


def compile_partition(
    part: GraphPartition,
    providers: Sequence[ExecutionProvider],
    reports: dict[str, PartitionReport],
    report_key: str = "",
    constants_override: dict[str, Any] | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> PreparedGraph:
    """Build the kernels of a partitioned graph and compile its fused groups; record its
    report under `report_key` (nested graphs are prepared on demand, when a control-flow
    kernel asks for them). `checkpoint`, when given, runs before each kernel is built."""
    graph = part.graph
    sub_reports: dict[str, PartitionReport] = {}
    host_io: dict[str, HostIO] = {}
    steps = _steps(part, providers, sub_reports, host_io, checkpoint or _no_checkpoint)
    report = PartitionReport.from_partition(part, [p.name for p in providers], sub_reports)
    reports[report_key] = report
    constants = {}
    for name, value in graph.initializers.items():
        if constants_override and name in constants_override:
            value = constants_override[name]
        if isinstance(value, SparseTensor):
            value = value.to_dense()
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        constants[name] = value
    inputs = [i.name for i in graph.inputs]
    outer = graph.outer_references() if graph.parent is not None else []
    if graph.parent is None:
        dangling = [x for x in graph.outer_references() if x not in inputs]
        if dangling:
            raise InvalidGraph(
                f"graph {graph.name!r}: values {dangling} are read but never defined"
            )
    return PreparedGraph(
        graph,
        steps,
        host_io,
        {p.name: p for p in providers},
        constants,
        inputs,
        outer,
        [o.name for o in graph.outputs],
        report,
    )


def build_plan(
    graph: Graph,
    providers: Sequence[ExecutionProvider],
    reports: dict[str, PartitionReport],
    report_key: str = "",
    constants_override: dict[str, Any] | None = None,
    policy: Any = None,
) -> Plan:
    """Partition `graph`, build its kernels, insert copies, and return the runnable plan."""
    return prepare_graph(graph, providers, reports, report_key, constants_override, policy).plan()


def _steps(
    part: GraphPartition,
    providers: Sequence[ExecutionProvider],
    sub_reports: dict[str, PartitionReport],
    host_io: dict[str, HostIO],
    checkpoint: Callable[[], None],
) -> list[Step]:
    graph = part.graph
    by_name = {n.name: n for n in graph.nodes}
    contexts = {p.name: p.kernel_context() for p in providers}
    single: dict[str, Step] = {}
    fused_steps: list[Step] = []
    fused_by_provider: dict[str, list[Any]] = {}
    for provider, cap in part.claims:
        if cap.fused:
            fused_by_provider.setdefault(provider.name, []).append((cap, GraphView(graph, {})))
            continue
        checkpoint()
        node = by_name[cap.nodes[0]]
        opset = graph.opsets.get(node.domain, 0)
        since = schema_since_version(node.domain, node.op_type, opset) or opset

        def builder(g: Graph, _node: str = node.name, _on: Any = provider.device) -> SubgraphRunner:
            key = f"{_node}/{g.name}"
            # a body is placed by the policy that placed its node (`GraphPartition.policy`)
            body = part.policy.for_body(_on, key) if part.policy is not None else None
            plan = build_plan(g, providers, sub_reports, key, policy=body)
            return _runner(plan)

        kn = KernelNode(node, opset, since, builder, contexts[provider.name])
        assert cap.kernel is not None
        try:
            fn = cap.kernel.factory(kn)
        except TurnoutError as e:
            if node.name in str(e):
                raise
            raise type(e)(f"node {node.name!r} ({node.op_type}) on {provider.name}: {e}") from e
        except Exception as e:
            raise EPFail(
                f"node {node.name!r} ({node.op_type}): {provider.name} could not build its "
                f"kernel: {type(e).__name__}: {e}"
            ) from e
        if cap.kernel.host_inputs or cap.kernel.host_outputs:
            host_io[node.name] = HostIO(
                frozenset(cap.kernel.host_inputs), frozenset(cap.kernel.host_outputs)
            )
        single[node.name] = Step(
            node.name,
            node.op_type,
            provider.name,
            fn,
            node.inputs + node.implicit_inputs,
            node.outputs,
            _free_of(provider),
        )
    for provider in providers:
        groups = fused_by_provider.get(provider.name)
        if not groups:
            continue
        checkpoint()
        compiled = (
            _compile_subgraphs(provider, groups)
            if provider.compiles
            else compile_v1(provider, groups)
        )
        _check_group_outputs(graph, groups, compiled, provider.name)
        for ck in compiled:
            fused_steps.append(
                Step(
                    ck.name,
                    "FusedGroup",
                    provider.name,
                    ck.fn,
                    ck.inputs,
                    ck.outputs,
                    _free_of(provider),
                )
            )
    ordered = [single[n.name] for n in graph.nodes if n.name in single]
    if fused_steps:
        ordered = _toposort(ordered + fused_steps, graph)
    return ordered


def _no_checkpoint() -> None:
    """Nothing to stop for: a build in the caller's own thread."""


def _free_of(provider: ExecutionProvider) -> Callable[[Any], None] | None:
    """The allocator's `free` for the plan to call on the provider's dead values, when it
    pools (a plain allocator is left to the garbage collector, at no cost per value)."""
    return provider.allocator.free if provider.allocator.pools else None


def fused_subgraph(cap: Capability, view: GraphView) -> FusedSubgraph:
    """A claimed group as a subgraph: its nodes, its typed boundary (`turnout.sdk.fusion`), and
    the initializers it reads that no feed can replace."""
    idx = GraphIndex.of(view)
    members = list(cap.nodes)
    inputs = group_inputs(members, idx)
    fed = {i.name for i in view.inputs}
    constants = {x: view.initializer(x) for x in inputs if view.is_initializer(x) and x not in fed}
    return FusedSubgraph(
        name=cap.name or f"fused_{members[0]}",
        nodes=tuple(idx.by_name[n] for n in members),
        inputs=tuple(view.value_info(x) for x in inputs),
        outputs=tuple(view.value_info(y) for y in group_outputs(members, idx)),
        constants=constants,
        view=view,
    )


def _compile_subgraphs(
    provider: ExecutionProvider, groups: Sequence[tuple[Capability, GraphView]]
) -> list[CompiledKernel]:
    """The contract-2 compile: subgraphs in, create/compute/release states out, each state
    created now and released when its kernel function is dropped with the session."""
    subgraphs = [fused_subgraph(cap, view) for cap, view in groups]
    try:
        states = provider.compile_subgraphs(subgraphs)
    except TurnoutError:
        raise
    except Exception as e:  # a compiler bug must name the provider
        raise EPFail(f"{provider.name}: compile failed: {type(e).__name__}: {e}") from e
    if len(states) != len(subgraphs):
        raise EPFail(
            f"{provider.name}: compile_subgraphs returned {len(states)} states for "
            f"{len(subgraphs)} subgraphs"
        )
    out = []
    for state in states:
        handle = state.create()
        # compute(handle, *args) with no Python frame of its own: one call less per group
        # per run
        fn = functools.partial(state.compute, handle)
        weakref.finalize(fn, state.release, handle)
        out.append(CompiledKernel(state.name, fn, state.inputs, state.outputs))
    return out


def _check_group_outputs(
    graph: Graph, groups: Sequence[Any], compiled: Sequence[Any], provider: str
) -> None:
    """Every value a fused group produces and anything outside it reads must be an output."""
    if len(compiled) != len(groups):
        raise EPFail(
            f"{provider}: compile() returned {len(compiled)} kernels for {len(groups)} groups"
        )
    outside_reads: dict[str, set[str]] = {}
    for n in graph.nodes:
        for x in (*n.inputs, *n.implicit_inputs):
            outside_reads.setdefault(x, set()).add(n.name)
    graph_outputs = {o.name for o in graph.outputs}
    by_name = {n.name: n for n in graph.nodes}
    for (cap, _), ck in zip(groups, compiled):
        members = set(cap.nodes)
        for name in cap.nodes:
            for y in by_name[name].outputs:
                readers = outside_reads.get(y, set()) - members
                needed = bool(readers) or y in graph_outputs
                if y and needed and y not in ck.outputs:
                    raise EPFail(
                        f"{provider}: fused group {ck.name!r} hides {y!r}, which "
                        f"{sorted(readers) or 'the graph output'} still read(s)"
                    )


def _toposort(steps: list[Step], graph: Graph) -> list[Step]:
    producer = {y: i for i, st in enumerate(steps) for y in st.outputs if y}
    deps = [{producer[x] for x in st.inputs if x in producer} for st in steps]
    done: list[int] = []
    state = [0] * len(steps)

    def visit(i: int) -> None:
        if state[i] == 2:
            return
        if state[i] == 1:
            raise InvalidGraph(
                f"graph {graph.name!r}: fused groups form a cycle at {steps[i].name!r}"
            )
        state[i] = 1
        for d in sorted(deps[i]):
            visit(d)
        state[i] = 2
        done.append(i)

    for i in range(len(steps)):
        visit(i)
    return [steps[i] for i in done]


class BoundRunner:
    """A nested graph's plan as `KernelNode.subgraph` hands it out: `runner(inputs, outer)`
    returns the outputs as a list, reading outer-scope values from a dict.

    A control-flow kernel that calls its body many times (Loop, Scan) or on a hot path (If)
    asks once for `bind(order)`: a function of the inputs followed by the outer values in
    `order` (the node's implicit inputs), which calls the plan with no dict or list per call.
    """

    __slots__ = ("_outer", "_run", "plan")

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._outer = plan.outer_names
        self._run = plan.run

    def __call__(self, inputs: Sequence[Any], outer: dict[str, Any]) -> list[Any]:
        return list(self._run(*inputs, *[outer[n] for n in self._outer]))

    def bind(self, order: Sequence[str]) -> Callable[..., tuple[Any, ...]]:
        """`f(*inputs, *outer_values)`, the outer values given in `order`, which must name
        every outer value the plan reads (more is fine); returns the output tuple."""
        run, plan = self._run, self.plan
        if tuple(order) == self._outer:
            return run
        n_in = len(self.plan.input_names)
        pick = [n_in + list(order).index(name) for name in self._outer]
        keep = list(range(n_in)) + pick
        n_args = n_in + len(order)

        def bound(*args: Any) -> tuple[Any, ...]:
            if len(args) != n_args:  # as the plan itself would refuse a wrong count
                raise TypeError(f"graph {plan.graph_name!r} takes {n_args} values, got {len(args)}")
            return run(*[args[i] for i in keep])

        return bound


def _runner(plan: Plan) -> SubgraphRunner:
    return BoundRunner(plan)
