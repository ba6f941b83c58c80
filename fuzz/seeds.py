"""The raw material: single-node ONNX backend node tests, indexed for mutation and chaining.

Cases are derived from the node tests' own nodes so that every op, dtype and attribute the
official suite knows is covered without a hand-written op list. Ops with random outputs are left
out: two runtimes cannot agree on them.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

__all__ = ["NONDETERMINISTIC", "Seed", "SeedPool", "load_seeds"]

NONDETERMINISTIC = frozenset(
    {
        "Bernoulli",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)
"""Ops whose outputs are random by definition; never fuzzed."""


@dataclass(frozen=True)
class Seed:
    """One single-node case: its node, opsets, first data set's inputs (one per non-empty name)."""

    name: str
    node: onnx.NodeProto
    opsets: tuple[tuple[str, int], ...]
    inputs: tuple[Any, ...]
    rtol: float
    atol: float

    @property
    def op(self) -> str:
        d = self.node.domain
        return self.node.op_type if d in ("", "ai.onnx") else f"{d}::{self.node.op_type}"


class SeedPool:
    """Seeds with lookups by op (attribute pools) and by first input's dtype and shape (what a
    chain needs to feed one node's output to the next)."""

    def __init__(self, seeds: list[Seed]) -> None:
        self.seeds = seeds
        self.by_op: dict[str, list[Seed]] = defaultdict(list)
        self.by_input: dict[tuple[str, tuple[int, ...]], list[Seed]] = defaultdict(list)
        for s in seeds:
            self.by_op[s.op].append(s)
            if s.inputs and isinstance(s.inputs[0], np.ndarray) and s.node.input[0]:
                self.by_input[s.inputs[0].dtype.str, s.inputs[0].shape].append(s)

    @functools.cached_property
    def attribute_pool(self) -> dict[str, dict[str, list[onnx.AttributeProto]]]:
        """op -> attribute name -> every value the node tests give it (graphs left out)."""
        pool: dict[str, dict[str, list[onnx.AttributeProto]]] = defaultdict(dict)
        for s in self.seeds:
            for a in s.node.attribute:
                if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    continue
                values = pool[s.op].setdefault(a.name, [])
                if all(v != a for v in values):
                    values.append(a)
        return pool

    def ops(self) -> list[str]:
        return sorted(self.by_op)


def _is_plain(value: Any) -> bool:
    """Tensors only: sequences, optionals and maps stay out of the fuzzer for now."""
    return isinstance(value, np.ndarray) and value.dtype.kind in "biufU"


def load_seeds(ops: set[str] | None = None) -> SeedPool:
    """Every deterministic single-node node test whose inputs are plain tensors (~10 s: onnx
    builds its node tests in memory); `ops` keeps only those op types."""
    from turnout.tools.testing import iter_node_cases

    by_domain: dict[str, set[str]] = defaultdict(set)
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.name not in NONDETERMINISTIC and (ops is None or schema.name in ops):
            by_domain[schema.domain].add(schema.name)
    seeds = []
    seen: set[str] = set()
    for domain, op_types in sorted(by_domain.items()):
        for case in iter_node_cases(op_types, domain):
            if case.name in seen:  # the first data set of a case is enough
                continue
            seen.add(case.name)
            inputs = case.inputs
            if not all(_is_plain(v) for v in inputs):
                continue
            if len(inputs) != sum(1 for n in case.node.input if n):
                continue
            opsets = tuple(sorted(case.opsets.items()))
            seeds.append(Seed(case.name, case.node, opsets, tuple(inputs), case.rtol, case.atol))
    seeds.sort(key=lambda s: s.name)  # fixed order: a seed number means the same case anywhere
    return SeedPool(seeds)
