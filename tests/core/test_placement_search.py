"""The measured placement's search (`CostModel.improve`) prices only the units a move can
change: on random graphs, candidates and copy costs it ends where pricing every unit at every
sweep ends, and at a plan no single move improves."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from onnx import TensorProto, helper

from turnout.engine.placement.cost import CostModel
from turnout.engine.placement.timing import Candidate, CopyTimes
from turnout.graph.ir import Graph
from turnout.sdk.provider import CPU, Capability, Device

LAB = Device("lab", 0)


@dataclass
class _Provider:
    name: str
    device: Device


class _EveryUnit(CostModel):
    """The search as it was: every unit priced at every sweep."""

    def _near(self, node: str) -> set[str]:
        return set(self.order)


def _random_case(seed: int) -> tuple[Graph, list[_Provider], dict[str, list[Candidate]], Any]:
    rnd = random.Random(seed)
    values, nodes = ["x"], []
    for i in range(rnd.randint(3, 30)):
        op = rnd.choice(["Relu", "Add", "Neg", "Mul"])
        ins = [rnd.choice(values[-5:]) for _ in range(2 if op in ("Add", "Mul") else 1)]
        nodes.append(helper.make_node(op, ins, [f"v{i}"], name=f"n{i}"))
        values.append(f"v{i}")
    width = rnd.choice([16, 1024, 65536])
    info = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [width]) for v in values]
    g = helper.make_graph(nodes, "g", info[:1], [info[-1]], value_info=info[1:-1])
    graph = Graph.from_proto(g, {"": 17})
    providers = [_Provider("lab", LAB), _Provider("fast", CPU), _Provider("cpu", CPU)]
    candidates: dict[str, list[Candidate]] = {n.name: [] for n in graph.nodes}
    names = [n.name for n in graph.nodes]
    for p in providers:
        k = 0
        while k < len(names):
            if rnd.random() < 0.2 and p.name != "cpu":
                k += 1  # this provider does not claim the node
                continue
            size = rnd.choice([1, 1, 2, 3]) if p.name == "fast" else 1
            members = tuple(names[k : k + size])
            timed = rnd.random() < 0.9 or p.name == "cpu"
            c = Candidate(
                p.name, members, None, Capability(members),
                seconds=rnd.uniform(1e-5, 1e-3) if timed else None,
            )  # fmt: skip
            for m in members:
                candidates[m].append(c)
            k += size
    sizes = {width * 4}
    copies = CopyTimes(
        {CopyTimes.key(str(LAB), d, s): rnd.uniform(0, 5e-4) for d in ("up", "down") for s in sizes}
    )
    return graph, providers, candidates, copies


def test_the_search_ends_where_pricing_every_unit_ends() -> None:
    moved = 0
    for seed in range(80):
        graph, providers, candidates, copies = _random_case(seed)
        fast = CostModel(graph, providers, candidates, copies)
        slow = _EveryUnit(graph, providers, candidates, copies)
        for seed_plan in (fast.priority_plan(), fast.host_plan(), fast.fastest_plan()):
            got = fast.improve(seed_plan)
            assert got == slow.improve(seed_plan), seed
            moved += got != seed_plan
        assert fast.best_plan() == slow.best_plan(), seed
    assert moved > 20  # the cases make the search move claims, not only confirm the seeds
