"""The cost model of measured placement, and the search for the cheapest plan.

A plan's cost is the sum of its kernels' measured times plus the copies its placement causes:
one copy per value and device that reads it away from where it was made (a kernel's declared
host inputs and outputs stay on the host; graph outputs come back to the host; initializers
are uploaded once, when the session is built, so they cost nothing per run). A node in a fused
group costs its share of the group's time.

The search starts from three plans (priority's, the host's: every node on the first provider
on the CPU that claims it, and the fastest kernel for each node) and moves claims (a node, or
a whole fused group) to another provider while that lowers the plan's cost by more than
`TIE` (`SAME_DEVICE_TIE` between two providers on one device); the cheapest result wins,
and priority wins ties, between plans as between claims.
A node whose candidates are not all timed goes to the first provider that claims it on the
device its input was made on (a nested graph's: its control-flow node's device), else where
priority puts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.engine.placement.timing import Candidate, CopyTimes, static_shape
from turnout.graph.ir import Graph
from turnout.sdk.provider import CPU, ExecutionProvider

__all__ = ["TIE", "CostModel"]

TIE = 0.03
"""A move must save more than this share of what it touches (and a plan must beat priority's
by as much) to count: closer than that, priority decides."""
SAME_DEVICE_TIE = 0.25
"""Between two providers on one device (the numba and numpy kernels on the host), a move must
save this share: a kernel timed alone on hot data gains little that survives in the plan
(caches, a fused group kept whole, threads), and a small gain is within the timing noise of
a busy machine."""
MIN_GAIN_S = 1e-6
MAX_SWEEPS = 20
HOST = str(CPU)
_Unit = tuple[str, tuple[str, ...]]  # a provider and the nodes of one of its claims


@dataclass
class _Value:
    nbytes: int
    producer: str | None  # None: a graph input or an initializer
    out_index: int = 0
    readers: list[tuple[str, int]] = field(default_factory=list)
    graph_output: bool = False
    constant: bool = False


class CostModel:
    """The measured times of one graph's candidates and copies, and plans priced with them."""

    def __init__(
        self,
        graph: Graph,
        providers: Sequence[ExecutionProvider],
        candidates: Mapping[str, list[Candidate]],
        copies: CopyTimes,
        prefer: str | None = None,
    ) -> None:
        self.prefer = prefer  # the device of untimed nodes, where a provider there claims them
        self.followed: dict[str, str] = {}  # untimed node -> the device of its input
        self.order = [n.name for n in graph.nodes]
        self.position = {n: i for i, n in enumerate(self.order)}
        self.device = {p.name: str(p.device) for p in providers}
        self.rank = {p.name: i for i, p in enumerate(providers)}
        self.candidates = candidates  # node -> candidates in priority order
        # (node, provider) -> its candidate; the device, host inputs and host outputs of its
        # kernel; its time per node (the search asks these ~10^5 times on a 900-node graph)
        self._by_provider: dict[tuple[str, str], Candidate] = {}
        self._io: dict[tuple[str, str], tuple[str, frozenset[int], frozenset[int]]] = {}
        self._seconds: dict[tuple[str, str], float] = {}
        self._unit_index: tuple[list[_Unit], dict[str, list[_Unit]]] | None = None  # `_units`
        for n, cands in candidates.items():
            for c in cands:
                if (n, c.provider) in self._by_provider:
                    continue
                self._by_provider[n, c.provider] = c
                kernel = c.cap.kernel
                ins = frozenset(kernel.host_inputs) if kernel is not None else frozenset()
                outs = frozenset(kernel.host_outputs) if kernel is not None else frozenset()
                self._io[n, c.provider] = (self.device[c.provider], ins, outs)
                self._seconds[n, c.provider] = c.per_node() or 0.0
        self.copies = copies
        self.values: dict[str, _Value] = {}
        self.touching: dict[str, list[str]] = {}  # node -> values it reads or writes
        for node in graph.nodes:
            names = []
            for j, y in enumerate(node.outputs):
                if y:
                    self.values[y] = _Value(_nbytes(graph, y), node.name, j)
                    names.append(y)
            self.touching[node.name] = names
        for node in graph.nodes:
            for i, x in enumerate(node.inputs):
                if not x:
                    continue
                v = self.values.get(x)
                if v is None:
                    v = self.values[x] = _Value(_nbytes(graph, x), None)
                    v.constant = x in graph.initializers
                v.readers.append((node.name, i))
                self.touching[node.name].append(x)
        for o in graph.outputs:
            if o.name in self.values:
                self.values[o.name].graph_output = True
        self.frozen = {n for n, cs in candidates.items() if len(cs) > 1 and not _comparable(cs)}

    # ------------------------------------------------------------------ pricing
    def options(self, node: str) -> list[Candidate]:
        """The candidates a node may move to: timed ones (all of them when it is frozen)."""
        cs = self.candidates[node]
        return cs if node in self.frozen else [c for c in cs if c.seconds is not None] or cs[:1]

    def candidate(self, node: str, provider: str) -> Candidate:
        return self._by_provider[node, provider]

    def kernel_cost(self, node: str, provider: str) -> float:
        return self._seconds[node, provider]

    def _want(self, node: str, provider: str, index: int, output: bool) -> str:
        device, host_inputs, host_outputs = self._io[node, provider]
        return HOST if index in (host_outputs if output else host_inputs) else device

    def value_cost(self, name: str, plan: Mapping[str, str]) -> float:
        """The copies value `name` causes in `plan`, per run."""
        v = self.values[name]
        if v.constant or not v.nbytes:
            return 0.0
        home = (
            HOST
            if v.producer is None
            else self._want(v.producer, plan[v.producer], v.out_index, True)
        )
        wanted = {self._want(r, plan[r], i, False) for r, i in v.readers}
        if v.graph_output:
            wanted.add(HOST)
        return sum(self.copy_cost(home, d, v.nbytes) for d in wanted if d != home)

    def copy_cost(self, src: str, dst: str, nbytes: int) -> float:
        if src == HOST:
            return self.copies.get(dst, "up", nbytes)
        if dst == HOST:
            return self.copies.get(src, "down", nbytes)
        return self.copies.get(src, "down", nbytes) + self.copies.get(dst, "up", nbytes)

    def cost(self, plan: Mapping[str, str]) -> tuple[float, float]:
        """(kernel seconds, copy seconds) of a whole plan."""
        kernels = sum(self.kernel_cost(n, plan[n]) for n in self.order)
        copies = sum(self.value_cost(v, plan) for v in self.values)
        return kernels, copies

    def _local(self, nodes: Sequence[str], plan: Mapping[str, str]) -> float:
        values = {v for n in nodes for v in self.touching[n]}
        return sum(self.kernel_cost(n, plan[n]) for n in nodes) + sum(
            self.value_cost(v, plan) for v in values
        )

    # ------------------------------------------------------------------ seeds and search
    def priority_plan(self) -> dict[str, str]:
        """Each node on its first candidate (a priority candidate that could not run sample
        data gives way to the next one timed; an untimed node goes to the first candidate on
        the preferred device, when there is one)."""
        plan = {n: self.options(n)[0].provider for n in self.order}
        if self.prefer is not None:
            for n in self.frozen:
                there = [c for c in self.candidates[n] if self.device[c.provider] == self.prefer]
                if there:
                    plan[n] = there[0].provider
        return plan

    def host_plan(self) -> dict[str, str]:
        """Each node on the first provider on the host that may take it (else priority's)."""
        plan = self.priority_plan()
        for n in self.order:
            if n in self.frozen:
                continue
            for c in self.options(n):
                if self.device[c.provider] == HOST:
                    plan[n] = c.provider
                    break
        return plan

    def fastest_plan(self) -> dict[str, str]:
        """Each node on its fastest kernel: a candidate replaces the one before it in priority
        order when it is faster by more than the tie (`TIE`, `SAME_DEVICE_TIE`)."""
        plan = self.priority_plan()
        for n in self.order:
            if n in self.frozen:
                continue
            options = self.options(n)
            best = options[0]
            for c in options[1:]:
                if (c.per_node() or 0.0) < (best.per_node() or 0.0) * (1 - self._tie(best, c)):
                    best = c
            plan[n] = best.provider
        return plan

    def _tie(self, a: Candidate | str, b: Candidate | str) -> float:
        """The share a move from `a`'s provider to `b`'s must save."""
        pa = a if isinstance(a, str) else a.provider
        pb = b if isinstance(b, str) else b.provider
        return SAME_DEVICE_TIE if self.device[pa] == self.device[pb] else TIE

    def improve(self, plan: dict[str, str]) -> dict[str, str]:
        """Move claims while a move lowers the cost by more than `TIE` of what it touches."""
        plan = dict(plan)
        ordered, affected = self._units()
        dirty = set(ordered)
        for _ in range(MAX_SWEEPS):
            moved = False
            for unit in ordered:
                if unit not in dirty:
                    continue
                dirty.discard(unit)
                provider, nodes = unit
                members = [n for n in nodes if n not in self.frozen and plan[n] != provider]
                if not members:
                    continue
                before = self._local(members, plan)
                tie = min(self._tie(plan[n], provider) for n in members)
                was = {n: plan[n] for n in members}
                plan.update(dict.fromkeys(members, provider))  # tried in place: a copy of
                after = self._local(members, plan)  # the plan per move was quadratic
                if before - after > max(MIN_GAIN_S, tie * before):
                    moved = True
                    for n in members:
                        dirty.update(affected.get(n, ()))
                else:
                    plan.update(was)
            if not moved:
                break
        return plan

    def _units(self) -> tuple[list[_Unit], dict[str, list[_Unit]]]:
        """The units a search may move (a provider and the nodes of one of its claims), in
        graph and priority order, and per node the units whose price it changes: a unit's
        answer changes only when a node sharing a value with one of its nodes moves, so the
        search skips the others (the same moves, in the same order, as pricing every unit at
        every sweep; that was most of a 900-node graph's placing time). Built once: every
        seed's search uses them."""
        if self._unit_index is None:
            units = {
                (c.provider, c.nodes)
                for n in self.order
                if n not in self.frozen
                for c in self.options(n)
                if c.seconds is not None
            }
            ordered = sorted(units, key=lambda u: (self.position[u[1][0]], self.rank[u[0]]))
            affected: dict[str, list[_Unit]] = {}
            for unit in ordered:
                for n in {m for node in unit[1] for m in self._near(node)}:
                    affected.setdefault(n, []).append(unit)
            self._unit_index = (ordered, affected)
        return self._unit_index

    def _near(self, node: str) -> set[str]:
        """`node` and the nodes that make or read a value it reads or makes."""
        out = {node}
        for v in self.touching[node]:
            value = self.values[v]
            if value.producer is not None:
                out.add(value.producer)
            out.update(r for r, _ in value.readers)
        return out

    def best_plan(self) -> tuple[dict[str, str], dict[str, float]]:
        """The cheapest plan found, and the totals of the plans compared (seconds)."""
        seeds = {
            "priority": self.priority_plan(),
            "host": self.host_plan(),
            "fastest": self.fastest_plan(),
        }
        totals = {name: sum(self.cost(plan)) for name, plan in seeds.items()}
        best_name, best = "priority", seeds["priority"]
        best_total = totals["priority"]
        searched: list[tuple[dict[str, str], dict[str, str], float]] = []  # seed, plan, total
        for name, seed in seeds.items():
            done = [(plan, total) for s, plan, total in searched if s == seed]  # seeds repeat
            if done:
                plan, total = done[0]
            else:
                plan = self.improve(seed)
                total = sum(self.cost(plan))
                searched.append((seed, plan, total))
            if total < best_total * (1 - TIE) or (name == "priority" and total < best_total):
                best_name, best, best_total = name, plan, total
        if self.prefer is None:
            best = self._follow_inputs(best)
            best_total = sum(self.cost(best))
        totals["measured"] = best_total
        return best, {**totals, "seed": best_name}  # type: ignore[dict-item]

    def _follow_inputs(self, plan: dict[str, str]) -> dict[str, str]:
        """Each node that could not be timed goes, in graph order, to the first provider that
        claims it on the device its first computed input was made on (the host for graph
        inputs): its copies are the one thing known about it."""
        plan = dict(plan)
        for n in self.order:
            if n not in self.frozen:
                continue
            device = HOST
            for v in self.touching[n]:
                value = self.values[v]
                if value.producer is not None and value.producer != n:
                    device = self.device[plan[value.producer]]
                    break
            there = [c for c in self.candidates[n] if self.device[c.provider] == device]
            if there:
                plan[n] = there[0].provider
                self.followed[n] = device
        return plan

    # ------------------------------------------------------------------ reporting
    def explain(self, plan: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """Per node: the candidates (kernel time, the copies each causes here, the sum), the
        winner and why it won."""
        out: dict[str, dict[str, Any]] = {}
        trial = dict(plan)  # one node changed at a time, put back after
        for n in self.order:
            rows = []
            for c in self.candidates[n]:
                trial[n] = c.provider
                copies = sum(self.value_cost(v, trial) for v in set(self.touching[n]))
                rows.append(
                    {
                        "provider": c.provider,
                        "kernel_s": c.seconds,
                        "group": c.group,
                        "group_size": len(c.nodes),
                        "copy_s": copies,
                        "note": c.note,
                    }
                )
            trial[n] = plan[n]
            out[n] = {"winner": plan[n], "reason": self._reason(n, plan, rows), "candidates": rows}
        return out

    def _reason(self, node: str, plan: Mapping[str, str], rows: list[dict[str, Any]]) -> str:
        if len(rows) == 1:
            return "the only provider that claims it"
        if node in self.frozen:
            notes = "; ".join(f"{r['provider']}: {r['note']}" for r in rows if r["note"])
            on = self.prefer or self.followed.get(node)
            rule = "priority" if on is None else f"priority on {on}, its inputs' device"
            if self.prefer is not None:
                rule = f"priority on {on}, its control-flow node's device"
            return f"kept by {rule}: not every candidate was timed ({notes})"
        winner = next(r for r in rows if r["provider"] == plan[node])
        timed = [r for r in rows if r["kernel_s"] is not None]
        share = {r["provider"]: r["kernel_s"] / r["group_size"] for r in timed}
        total = {r["provider"]: share[r["provider"]] + r["copy_s"] for r in timed}
        mine = total[winner["provider"]]
        others = {p: t for p, t in total.items() if p != winner["provider"]}
        if not others:
            return "the only candidate timed"
        rival, theirs = min(others.items(), key=lambda pt: pt[1])
        if theirs < mine:
            return f"{rival} alone would cost less here, but the plan as a whole costs more"
        if mine > theirs * (1 - TIE) and rows[0]["provider"] == winner["provider"]:
            return f"within {TIE:.0%} of {rival}: priority decides"
        if share[winner["provider"]] <= share[rival]:
            return (
                f"fastest kernel ({_us(share[winner['provider']])} vs {rival} {_us(share[rival])})"
            )
        return (
            f"fewer copies: {rival}'s kernel is faster ({_us(share[rival])}) but its copies "
            f"cost {_us(next(r['copy_s'] for r in timed if r['provider'] == rival))}"
        )


def _comparable(candidates: Sequence[Candidate]) -> bool:
    """Whether a node may move: its priority candidate and at least one other are timed."""
    timed = [c for c in candidates if c.seconds is not None]
    return (candidates[0].seconds is not None and len(timed) > 1) or _errors_only(candidates)


def _errors_only(candidates: Sequence[Candidate]) -> bool:
    """The priority candidate failed on sample data and another was timed: the others
    compete (a kernel that cannot run sample data is not a candidate)."""
    first = candidates[0]
    return (
        first.seconds is None
        and first.note.startswith("not timed:")
        and any(c.seconds is not None for c in candidates[1:])
    )


def _nbytes(graph: Graph, name: str) -> int:
    known = static_shape(graph, name)
    if known is None:
        return 0
    shape, dtype = known
    n = 1
    for d in shape:
        n *= d
    return n * dtype.itemsize


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"
