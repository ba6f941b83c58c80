"""`turnout conformance --placement-times`: per op, where a provider wins and loses against the
CPU host path, by measured placement's own numbers (issue 33).

Each node case runs once as a session of `[provider, CPUExecutionProvider]` with
`session.turnout.placement = measured`: its timing pass times the provider's kernel and the
host's (the CPU provider's numpy kernels, and the host providers serving it) at the case's
shapes. Per op type the table counts the nodes where the provider's kernel is faster than the
host's best (a win), slower (a loss), within `TIE` (a tie), or could not be compared, and the
median of provider time / host time. Copies are left out: they are the same for every op.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OpTimes", "placement_times", "to_text"]

TIE = 0.03


@dataclass
class OpTimes:
    """One provider's record on one op type against the host."""

    wins: int = 0
    ties: int = 0
    losses: int = 0
    untimed: int = 0
    ratios: list[float] = field(default_factory=list)

    def median_ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None


def placement_times(
    cases: Iterable[Any], providers: Sequence[str], budget_s: float = 10.0
) -> dict[str, dict[str, OpTimes]]:
    """provider -> op type -> its record, over the node `cases` each provider claims."""
    import turnout
    from turnout.sdk.plugins import registry

    out: dict[str, dict[str, OpTimes]] = {p: {} for p in providers}
    node_cases = [c for c in cases if c.kind == "node"]
    for provider in providers:
        for case in node_cases:
            so = turnout.SessionOptions()
            so.placement = "measured"
            so.fallback = "allow"
            so.add_session_config_entry("session.turnout.placement_budget_s", str(budget_s))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sess = turnout.InferenceSession(
                        case.load_model(), so, providers=[provider, "CPUExecutionProvider"]
                    )
            except Exception:  # a case the session refuses is the conformance run's business
                continue
            report = sess.partition_report()
            _count(report, registry.resolve(provider).name, out[provider])
    return out


def _count(report: Any, provider: str, table: dict[str, OpTimes]) -> None:
    hosts = {"CPUExecutionProvider", *report.hosts}
    ops = {a.node: a.op_type for a in report.assignments}
    for node, entry in (report.placement or {}).get("nodes", {}).items():
        rows = {r["provider"]: r for r in entry["candidates"]}
        if provider not in rows:
            continue
        rec = table.setdefault(ops[node], OpTimes())
        mine = _per_node(rows[provider])
        theirs = [t for p, r in rows.items() if p in hosts and (t := _per_node(r)) is not None]
        if mine is None or not theirs:
            rec.untimed += 1
            continue
        ratio = mine / min(theirs) if min(theirs) > 0 else float("inf")
        rec.ratios.append(ratio)
        if ratio < 1 - TIE:
            rec.wins += 1
        elif ratio > 1 + TIE:
            rec.losses += 1
        else:
            rec.ties += 1


def _per_node(row: dict[str, Any]) -> float | None:
    seconds = row["kernel_s"]
    return None if seconds is None else seconds / row["group_size"]


def to_text(table: dict[str, dict[str, OpTimes]]) -> str:
    """Per provider, one line per op: wins / ties / losses against the host, and the median
    time ratio (below 1: the provider is faster)."""
    lines = []
    for provider, ops in table.items():
        lines.append(f"{provider} against the CPU host path (measured kernel times):")
        lines.append(f"  {'op':<28} {'wins':>5} {'ties':>5} {'losses':>6} {'untimed':>8}  ratio")
        for op, rec in sorted(ops.items()):
            ratio = rec.median_ratio()
            shown = f"{ratio:.2f}" if ratio is not None else "-"
            lines.append(
                f"  {op:<28} {rec.wins:>5} {rec.ties:>5} {rec.losses:>6} {rec.untimed:>8}  {shown}"
            )
        if not ops:
            lines.append("  (no node case it claims)")
    return "\n".join(lines)
