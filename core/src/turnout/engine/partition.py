"""Partitioning: providers in priority order claim nodes; every decision is kept for the report.

Greedy, like onnxruntime: each provider sees the nodes no earlier provider claimed and returns
claims (single nodes or fused groups) and declines with reasons. The CPU provider is always last.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from turnout.engine.tiers import TierState
from turnout.graph import errors
from turnout.graph.errors import InvalidGraph
from turnout.graph.ir import Graph, GraphView
from turnout.sdk.provider import Capability, Decline, ExecutionProvider

__all__ = ["Assignment", "GraphPartition", "PartitionReport", "partition_graph"]


@dataclass(frozen=True)
class Assignment:
    """Where one node runs: provider, and how (`kernel`, `onnx.reference`, or a fused group).

    `name_in_model`: the model's name for a node that turnout suffixed at load (`F0::anon~1`
    for the second node named `F0::anon`), else None."""

    node: str
    op_type: str
    provider: str
    source: str
    group: str | None = None
    name_in_model: str | None = None

    def suffix_note(self) -> str:
        """The text report's mark of a suffixed node, `[~1 added by turnout]`, with its
        leading space; "" for the other nodes."""
        model_name = self.name_in_model
        if model_name is None:
            return ""
        if self.node.startswith(model_name):
            return f" [{self.node[len(model_name) :]} added by turnout]"
        return f" [renamed by turnout from {model_name!r}]"


@dataclass
class GraphPartition:
    """The result for one (sub)graph: claims per provider, in the order they were made."""

    graph: Graph
    claims: list[tuple[ExecutionProvider, Capability]]
    assignments: dict[str, Assignment]
    declines: dict[str, list[Decline]]
    placement: dict[str, Any] | None = None
    """How measured placement chose (`turnout.engine.placement`): per node its candidates,
    their times, the copies and the reason; None under the priority rule."""
    policy: Any = None
    """The placement policy that made it, when not priority's: nested graphs (If, Loop, Scan
    bodies) are placed by `policy.for_body(device, key)`, device the control-flow node's."""


def partition_graph(
    graph: Graph,
    providers: Sequence[ExecutionProvider],
    chosen: Mapping[str, str] | None = None,
) -> GraphPartition:
    """Assign every node of `graph` (not its subgraphs) to a provider, or raise naming the node.

    `chosen` (node -> provider name, from a placement policy) hides from each provider the
    nodes chosen for another, so each claims (and fuses) only its own; a node its chosen
    provider then declines goes by priority in a second round."""
    assigned: dict[str, str] = {}
    claims: list[tuple[ExecutionProvider, Capability]] = []
    assignments: dict[str, Assignment] = {}
    declines: dict[str, list[Decline]] = {}
    nodes = {n.name: n for n in graph.nodes}
    rounds = [chosen, None] if chosen else [None]
    for mask in rounds:
        for provider in providers:
            if mask is None and len(assigned) == len(nodes):
                break
            _claim(graph, provider, assigned, mask, claims, assignments, declines)
    missing = [node for node in graph.nodes if node.name not in assigned]
    if missing:
        _refuse(graph, missing, declines)
    return GraphPartition(graph, claims, assignments, declines)


def _claim(
    graph: Graph,
    provider: ExecutionProvider,
    assigned: dict[str, str],
    mask: Mapping[str, str] | None,
    claims: list[tuple[ExecutionProvider, Capability]],
    assignments: dict[str, Assignment],
    declines: dict[str, list[Decline]],
) -> None:
    """One provider's turn: it sees the nodes nobody claimed (and, with `mask`, only those
    chosen for it) and claims some of them."""
    nodes = {n.name: n for n in graph.nodes}
    hidden = assigned
    if mask is not None:
        hidden = {**{n: p for n, p in mask.items() if p != provider.name}, **assigned}
    got, declined = provider.get_capability(GraphView(graph, hidden))
    kept = declines.setdefault(provider.name, [])
    seen = set(kept)  # a second round (after `chosen`) repeats the first round's declines
    kept.extend(d for d in declined if d not in seen)
    for cap in got:
        if mask is not None and any(n in hidden and n not in assigned for n in cap.nodes):
            continue  # a claim over nodes chosen for another provider: not this provider's
        taken = [n for n in cap.nodes if n in assigned or n not in nodes]
        if taken:
            raise InvalidGraph(
                f"{provider.name} claimed node(s) {taken} that are unknown or already assigned"
            )
        group = cap.name or (f"{provider.name}_fused_{len(claims)}" if cap.fused else None)
        source = "fused" if cap.fused else cap.source
        for n in cap.nodes:
            assigned[n] = provider.name
            node = nodes[n]
            assignments[n] = Assignment(
                n, node.op_type, provider.name, source, group, node.name_in_model
            )
        claims.append((provider, cap))


def _refuse(graph: Graph, missing: list[Any], declines: dict[str, list[Decline]]) -> None:
    """Raise `NotImplemented` naming the nodes no provider claimed, with the declines."""
    lines = []
    for node in missing[:10]:
        why = "; ".join(
            f"{p}: {d.reason}" for p, ds in declines.items() for d in ds if d.node == node.name
        )
        kind = f"{node.domain or 'ai.onnx'}::{node.op_type}"
        lines.append(f"  {node.name} ({kind}): {why or 'no claim'}")
    more = f"\n  ... and {len(missing) - 10} more" if len(missing) > 10 else ""
    raise errors.NotImplemented(
        f"graph {graph.name!r}: no provider can run {len(missing)} node(s):\n"
        + "\n".join(lines)
        + more
    )


@dataclass
class PartitionReport:
    """Every node -> provider decision of a session, including nested graphs."""

    graph: str
    providers: list[str]
    assignments: list[Assignment]
    declines: dict[str, list[dict[str, str]]]
    copies: list[dict[str, Any]] = field(default_factory=list)
    subgraphs: dict[str, PartitionReport] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    """Providers that served the `CPUExecutionProvider` request (placed ahead of its numpy
    kernels); their nodes count as CPU nodes, not as fallbacks."""
    peak_bytes: dict[str, int] = field(default_factory=dict)
    """The plan's peak of live intermediate bytes per device, from the shapes known at
    session creation (values of unknown size count 0; `unsized` says how many)."""
    unsized: int = 0
    tier: TierState | None = None
    """Which kernels the session runs on (numpy, or the host providers' compiled ones) and
    since which run; None where there is one tier only (no host provider serves the CPU)."""
    placement: dict[str, Any] | None = None
    """Measured placement's record (`GraphPartition.placement`): per node the candidates,
    their kernel times, the copies each causes and why the winner won; None under priority."""

    def mark_hosts(self, hosts: Sequence[str]) -> None:
        """Record the host providers, in this report and its nested graphs'."""
        self.hosts = list(hosts)
        for sub in self.subgraphs.values():
            sub.mark_hosts(hosts)

    @staticmethod
    def from_partition(
        part: GraphPartition, providers: Sequence[str], subgraphs: dict[str, PartitionReport]
    ) -> PartitionReport:
        order = [n.name for n in part.graph.nodes]
        return PartitionReport(
            graph=part.graph.name,
            providers=list(providers),
            assignments=[part.assignments[n] for n in order],
            declines={p: [asdict(d) for d in ds] for p, ds in part.declines.items() if ds},
            subgraphs=subgraphs,
            placement=part.placement,
        )

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.assignments:
            out[a.provider] = out.get(a.provider, 0) + 1
        for sub in self.subgraphs.values():
            for k, v in sub.counts().items():
                out[k] = out.get(k, 0) + v
        return out

    def fallbacks(self, fallback_provider: str) -> list[tuple[str, str, str]]:
        """(node, op, reasons) for nodes that landed on `fallback_provider` (or a host provider
        serving it) although other providers were asked first; nested graphs included (their
        nodes as `outer/inner`). A node that measured placement put on the host although
        another provider claimed it is no fallback."""
        out: list[tuple[str, str, str]] = []
        fallback = {fallback_provider, *self.hosts}
        if self.providers and self.providers[0] not in fallback:
            measured = (self.placement or {}).get("nodes", {})
            for a in self.assignments:
                if a.provider not in fallback:
                    continue
                rows = measured.get(a.node, {}).get("candidates", ())
                if any(r["provider"] not in fallback for r in rows):
                    continue  # measured placement chose the host over another claim
                reasons = [
                    f"{p}: {d['reason']}"
                    for p, ds in self.declines.items()
                    if p not in fallback
                    for d in ds
                    if d["node"] == a.node
                ]
                out.append((a.node, a.op_type, "; ".join(reasons) or "not claimed"))
        for key, sub in self.subgraphs.items():
            out.extend((f"{key}/{n}", op, why) for n, op, why in sub.fallbacks(fallback_provider))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "graph": self.graph,
            "providers": self.providers,
            "counts": self.counts(),
            "assignments": [asdict(a) for a in self.assignments],
            "declines": self.declines,
            "copies": self.copies,
            "hosts": self.hosts,
            "peak_bytes": self.peak_bytes,
            "unsized_values": self.unsized,
            "tier": self.tier.to_dict() if self.tier is not None else None,
            "placement": self.placement,
            "subgraphs": {k: v.to_dict() for k, v in self.subgraphs.items()},
        }

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_dot(self, graph: Any = None) -> str:
        """Graphviz DOT: nodes coloured by provider (edges and copies when `graph` is given)."""
        from turnout.engine.report_render import to_dot

        return to_dot(self, graph)

    def to_html(self) -> str:
        """A self-contained HTML page of this report."""
        from turnout.engine.report_render import to_html

        return to_html(self)

    def to_text(self, indent: str = "") -> str:
        from turnout.engine.report_render import placement_lines, placement_summary

        serving = f" ({', '.join(self.hosts)} serving CPUExecutionProvider)" if self.hosts else ""
        lines = [
            f"{indent}graph {self.graph!r}: "
            + ", ".join(f"{p}={c}" for p, c in sorted(self.counts().items()))
            + serving
        ]
        for a in self.assignments:
            how = a.source if a.group is None else f"{a.source} {a.group}"
            lines.append(
                f"{indent}  {a.node:<32} {a.op_type:<24} {a.provider} ({how}){a.suffix_note()}"
            )
            lines.extend(
                f"{indent}      {line}" for line in placement_lines(self.placement, a.node)
            )
            for key, sub in self.subgraphs.items():
                if key.split("/", 1)[0] == a.node:
                    lines.append(sub.to_text(indent + "    "))
        for c in self.copies:
            kind = "upload once" if c.get("once") else "copy each run"
            lines.append(
                f"{indent}  {kind} {c['value']}: {c['src']} -> {c['dst']} "
                f"(for {', '.join(c['consumers'])})"
            )
        for p, ds in self.declines.items():
            for d in ds:
                lines.append(f"{indent}  declined by {p}: {d['node']}: {d['reason']}")
        if self.peak_bytes:
            unsized = (
                f" ({self.unsized} values of unknown size not counted)" if self.unsized else ""
            )
            peaks = ", ".join(
                f"{d} {b / 2**20:.1f} MiB" for d, b in sorted(self.peak_bytes.items())
            )
            lines.append(f"{indent}  planned peak of intermediate values: {peaks}{unsized}")
        if self.tier is not None:
            lines.append(f"{indent}  kernels: {self.tier.describe()}")
        if self.placement:
            lines.append(f"{indent}  {placement_summary(self.placement)}")
        return "\n".join(lines)
