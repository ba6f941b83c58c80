"""Small helpers for pattern matching over an OptGraph (producer/consumer walks)."""

from __future__ import annotations

from onnx import NodeProto

from .graph import OptGraph

__all__ = ["Matcher"]


class Matcher:
    """Producer and reader maps of `g`, frozen at construction (rebuild after edits)."""

    def __init__(self, g: OptGraph) -> None:
        self.g = g
        self.prod = g.producers()
        self.reads = g.consumers()
        self.outside = g.protected | g.subgraph_reads()

    def op(self, name: str, *ops: str) -> NodeProto | None:
        """The standard-domain node of one of `ops` that produces `name`, else None."""
        n = self.prod.get(name)
        if n is None or n.op_type not in ops or n.domain not in ("", "ai.onnx"):
            return None
        return n

    def readers(self, name: str) -> list[NodeProto]:
        return self.reads.get(name, [])

    def only_reader(self, name: str, *ops: str) -> NodeProto | None:
        """The single standard-domain reader of `name`, when it is one of `ops` (any if empty)."""
        r = self.reads.get(name, [])
        if len(r) != 1 or name in self.outside or r[0].domain not in ("", "ai.onnx"):
            return None
        if ops and r[0].op_type not in ops:
            return None
        return r[0]

    def internal(self, *names: str) -> bool:
        """None of `names` is a graph output or read by a nested graph."""
        return not any(n in self.outside for n in names)

    def other(self, n: NodeProto, name: str) -> str | None:
        """The other input of a binary node `n`, one of whose inputs is `name`."""
        if len(n.input) != 2:
            return None
        if n.input[0] == name:
            return str(n.input[1])
        if n.input[1] == name:
            return str(n.input[0])
        return None
