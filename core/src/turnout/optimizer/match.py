"""Small helpers for pattern matching over an OptGraph (producer/consumer walks)."""

from __future__ import annotations

from onnx import NodeProto

from turnout.optimizer.graph import OptGraph

__all__ = ["Matcher"]


class Matcher:
    """Producer and reader maps of `g`, frozen at construction: rebuild after edits, or make
    the edits through `replace` and `remove`, which keep the maps current."""

    def __init__(self, g: OptGraph) -> None:
        self.g = g
        self._prod: dict[str, NodeProto] | None = None
        self._reads: dict[str, list[NodeProto]] | None = None
        self._outside: set[str] | None = None

    # the maps are built when first asked for: a pass that finds no candidate never walks
    @property
    def prod(self) -> dict[str, NodeProto]:
        if self._prod is None:
            self._prod = self.g.producers()
        return self._prod

    @property
    def reads(self) -> dict[str, list[NodeProto]]:
        if self._reads is None:
            self._reads = self.g.consumers()
        return self._reads

    @property
    def outside(self) -> set[str]:
        if self._outside is None:
            self._outside = self.g.protected | self.g.subgraph_reads()
        return self._outside

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

    def replace(self, old: str, new: str) -> bool:
        """`g.replace_value(old, new)`, visiting only the readers these maps list and keeping
        the maps current, so a pass need not rebuild them after each rewrite."""
        if old == new:
            return True
        if old not in self.outside:
            moved = self.reads.pop(old, [])
            _rename(moved, old, new)
            _merge(self.reads.setdefault(new, []), moved)
            return True
        prod = self.prod.get(new)
        if prod is None or new in self.outside or new in self.g.input_names:
            return False
        prod.output[list(prod.output).index(new)] = old
        readers = [n for n in self.reads.pop(new, []) if n is not prod]
        _rename(readers, new, old)
        del self.prod[new]
        self.prod[old] = prod
        _merge(self.reads.setdefault(old, []), readers)
        self.g.forget_type(new)
        return True

    def remove(self, *nodes: NodeProto) -> None:
        """`g.remove(*nodes)`, dropping them from these maps too."""
        self.g.remove(*nodes)
        ids = {id(n) for n in nodes}
        for n in nodes:
            for x in n.input:
                if x in self.reads:
                    self.reads[x] = [r for r in self.reads[x] if id(r) not in ids]
            for o in n.output:
                if self.prod.get(o) is n:
                    del self.prod[o]


def _rename(nodes: list[NodeProto], old: str, new: str) -> None:
    for n in nodes:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new


def _merge(into: list[NodeProto], more: list[NodeProto]) -> None:
    into.extend(n for n in more if not any(n is r for r in into))
