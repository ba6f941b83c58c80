"""onnxruntime's view of a partition: `get_provider_graph_assignment_info` and the device
each input is expected on (`get_input_epdevices`), built from turnout's partition report.

onnxruntime lists one subgraph per compiled (fused) group and one per node a provider runs
with its own kernels; turnout's report carries the same facts (a node's provider, and the
fused group it belongs to), so this module only regroups them. The report's graph is the
optimized one: fused and rewritten nodes appear under their new names, as in onnxruntime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from turnout.api.ep_devices import OrtEpDevice, get_ep_devices
from turnout.engine.partition import PartitionReport
from turnout.graph.errors import Fail
from turnout.graph.ir import Graph

__all__ = [
    "RECORD_ASSIGNMENT_KEY",
    "OrtEpAssignedNode",
    "OrtEpAssignedSubgraph",
    "assigned_subgraphs",
    "input_ep_devices",
]

RECORD_ASSIGNMENT_KEY = "session.record_ep_graph_assignment_info"


@dataclass(frozen=True)
class OrtEpAssignedNode:
    name: str
    domain: str
    op_type: str


@dataclass(frozen=True)
class OrtEpAssignedSubgraph:
    """The nodes one provider runs as one unit: a fused group, or a single node."""

    ep_name: str
    nodes: tuple[OrtEpAssignedNode, ...]

    def get_nodes(self) -> list[OrtEpAssignedNode]:
        return list(self.nodes)


def assigned_subgraphs(
    report: PartitionReport, graph: Graph, config: Mapping[str, str]
) -> list[OrtEpAssignedSubgraph]:
    """The main graph's assignment, in node order (onnxruntime asks for the config entry
    first, so an application written for it gets the same error here)."""
    if config.get(RECORD_ASSIGNMENT_KEY) != "1":
        raise Fail(
            f"Session configuration entry '{RECORD_ASSIGNMENT_KEY}' must be set to \"1\" to "
            "retrieve EP graph assignment information."
        )
    domains = {n.name: n.domain for n in graph.nodes}
    groups: dict[tuple[str, str], list[OrtEpAssignedNode]] = {}
    for a in report.assignments:
        key = (a.provider, a.group or f"\0{a.node}")
        node = OrtEpAssignedNode(a.node, domains.get(a.node, ""), a.op_type)
        groups.setdefault(key, []).append(node)
    return [OrtEpAssignedSubgraph(ep, tuple(nodes)) for (ep, _), nodes in groups.items()]


def input_ep_devices(
    report: PartitionReport, graph: Graph, input_names: Sequence[str]
) -> list[OrtEpDevice | None]:
    """For each input, the EP device of the provider that reads it first (where feeding it
    avoids a copy). Host providers and inputs nobody reads map to the CPU provider's device."""
    provider_of = {a.node: a.provider for a in report.assignments}
    first_reader: dict[str, str] = {}
    for node in graph.nodes:
        for x in node.inputs:
            if x and x not in first_reader and node.name in provider_of:
                first_reader[x] = provider_of[node.name]
    devices = get_ep_devices()
    by_ep: dict[str, OrtEpDevice] = {}
    for d in devices:
        by_ep.setdefault(d.ep_name, d)
    cpu = by_ep.get("CPUExecutionProvider")
    out: list[OrtEpDevice | None] = []
    for name in input_names:
        device = by_ep.get(first_reader.get(name, ""), cpu)
        on_host = device is None or getattr(device.memory_info, "name", "Cpu") == "Cpu"
        out.append(cpu if on_host else device)
    return out
