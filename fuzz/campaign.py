"""A campaign: generated cases run on providers through the pool, records collected and summed.

Shared by the long run (`fuzz/run.py`) and the CI run (`tests/fuzz`), so both judge results the
same way: a finding is a crash, hang, bare exception or mismatch (against onnxruntime, or against
turnout's CPU provider for other providers) that no reviewed known difference explains.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .execute import FINDINGS
from .generate import FuzzCase, Generator
from .known import KNOWN, match_known
from .pool import Pool

__all__ = ["findings", "rejudge", "run_campaign", "summarize"]


def run_campaign(
    pool: Pool,
    generator: Generator,
    providers: Sequence[str],
    indices: Iterable[int],
    on_record: Callable[[FuzzCase, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run case i of `generator` on every provider, for each i: one record per (case, provider)."""
    tasks = ((generator.case(i), p) for i in indices for p in providers)
    records = []
    for case, provider, rec in pool.run(tasks):
        rec.update(
            id=case.id,
            provider=provider,
            ops=list(case.ops),
            seeds=list(case.seeds),
            mutations=list(case.mutations),
        )
        records.append(rejudge(rec))
        if on_record is not None:
            on_record(case, rec)
    return records


def rejudge(rec: dict[str, Any]) -> dict[str, Any]:
    """`rec` with the reviewed known difference that explains it, if any (`known`, `known_cpu`)."""
    rec.pop("known", None)
    rec.pop("known_cpu", None)
    explained = match_known(rec, "ort") if rec["outcome"] in FINDINGS else None
    if explained is not None:
        rec["known"] = explained.reason
    explained_cpu = match_known(rec, "cpu") if rec.get("vs_cpu") in FINDINGS else None
    if explained_cpu is not None:
        rec["known_cpu"] = explained_cpu.reason
    return rec


def findings(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records with an unexplained crash, hang, bare exception or mismatch."""
    out = []
    for r in records:
        if (r["outcome"] in FINDINGS and "known" not in r) or (
            r.get("vs_cpu") in FINDINGS and "known_cpu" not in r
        ):
            out.append(r)
    return out


def summarize(records: Sequence[dict[str, Any]], examples: int = 3) -> dict[str, Any]:
    """Counts per provider: by outcome class, vs CPU, by op (each op of a chain counts), the
    errors turnout wrapped from bare exceptions, known differences used, and example findings."""
    out: dict[str, Any] = {}
    for provider in sorted({r["provider"] for r in records}):
        rs = [r for r in records if r["provider"] == provider]
        by_op: dict[str, Counter[str]] = defaultdict(Counter)
        for r in rs:
            for op in set(r["ops"]):
                by_op[op][r["outcome"]] += 1
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in findings(rs):
            vs = f"{r.get('vs_cpu', '')}|{r.get('vs_reference', '')}"
            key = f"{r['outcome']}|{vs}|{','.join(sorted(set(r['ops'])))}"
            groups[key].append(r)
        used = Counter(r["known"] for r in rs if "known" in r)
        used.update(r["known_cpu"] for r in rs if "known_cpu" in r)
        out[provider] = {
            "cases": len(rs),
            "outcomes": dict(Counter(r["outcome"] for r in rs).most_common()),
            "vs_cpu": dict(Counter(r["vs_cpu"] for r in rs if "vs_cpu" in r).most_common()),
            "on_provider": {
                "all nodes": sum(1 for r in rs if r.get("nodes") and r["placed"] == r["nodes"]),
                "some nodes": sum(1 for r in rs if 0 < r.get("placed", 0) < r.get("nodes", 0)),
                "none": sum(1 for r in rs if not r.get("placed")),
            },
            "chains": dict(Counter(len(r["ops"]) for r in rs)),
            "mismatch_vs_reference": dict(
                Counter(r["vs_reference"] for r in rs if "vs_reference" in r).most_common()
            ),
            "wrapped_bare": dict(
                Counter(r["wrapped"] for r in rs if r.get("wrapped")).most_common()
            ),
            "known_used": dict(used.most_common()),
            "known_unused": sorted({k.reason for k in KNOWN} - set(used)),
            "findings": {
                key: {"count": len(g), "examples": [_brief(r) for r in g[:examples]]}
                for key, g in sorted(groups.items(), key=lambda kv: -len(kv[1]))
            },
            "by_op": {op: dict(c) for op, c in sorted(by_op.items())},
        }
    return out


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "seeds", "mutations", "detail", "vs_cpu_detail", "turnout_error", "oracle_error")
    return {k: r[k] for k in keys if r.get(k)}
