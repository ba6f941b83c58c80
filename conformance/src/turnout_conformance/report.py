"""Reports of a conformance run: per-provider summary, a table per op type, the slowest cases;
as text, JSON, Markdown and JUnit XML."""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from .runner import Result

__all__ = ["COLUMNS", "STATUSES", "UNEXPECTED", "Report"]

STATUSES = ("passed", "failed", "unclaimed", "crash", "timeout", "xfail", "xpass")
COLUMNS = ("cases", "claimed", "exercised", "not_exercised", *STATUSES, "inherited")
"""Summary columns. claimed: the provider ran every node of the case; exercised: at least one
(in isolated mode both mean it declined none); inherited: xfails from the CPU provider's list."""
UNEXPECTED = frozenset({"failed", "crash", "timeout", "xpass"})
SLOWEST = 10


@dataclass
class Report:
    """All results of one run, with what the run was asked to do."""

    results: list[Result]
    mode: str
    providers: list[str]
    kinds: list[str]
    wall_seconds: float
    jobs: int = 1
    pattern: str | None = None
    collect_seconds: float = 0.0
    meta: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ numbers
    def summary(self) -> dict[str, dict[str, int]]:
        """provider -> counts: one entry per column of `COLUMNS`."""
        return {
            p: _count([r for r in self.results if r.provider == p], COLUMNS) for p in self.providers
        }

    def by_op(self) -> dict[str, dict[str, dict[str, int]]]:
        """op type -> provider -> counts: cases, claimed, exercised, inherited and the statuses
        that occurred."""
        grouped: dict[str, dict[str, list[Result]]] = {}
        for r in self.results:
            grouped.setdefault(r.op, {}).setdefault(r.provider, []).append(r)
        keys = ("cases", "claimed", "exercised", "inherited")
        out = {
            op: {
                p: {k: v for k, v in _count(rs, COLUMNS).items() if v or k in keys}
                for p, rs in per.items()
            }
            for op, per in grouped.items()
        }
        return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))

    def inherited(self) -> list[Result]:
        """Expected failures inherited from another provider's reviewed list."""
        return [r for r in self.results if r.status == "xfail" and r.expected_from]

    def unexpected(self) -> list[Result]:
        return [r for r in self.results if r.status in UNEXPECTED]

    def slowest(self, n: int = SLOWEST) -> list[Result]:
        return sorted(self.results, key=lambda r: -r.seconds)[:n]

    @property
    def ok(self) -> bool:
        return not self.unexpected()

    # ------------------------------------------------------------------ text
    def to_text(self, details: int = 50) -> str:
        lines = [self._headline(), ""]
        width = max([len(p) for p in self.providers] + [8])
        head = [c.replace("_", " ") for c in COLUMNS]
        lines.append(f"{'provider':<{width}}  " + " ".join(f"{h:>9}" for h in head))
        for p, counts in self.summary().items():
            cells = (f"{counts[c]:>{max(9, len(h))}}" for c, h in zip(COLUMNS, head))
            lines.append(f"{p:<{width}}  " + " ".join(cells))
        if self.mode == "fallback":
            lines += ["", _FALLBACK_NOTE]
        inherited = self.inherited()
        if inherited:
            lines += ["", f"expected failures inherited ({len(inherited)}):"]
            for r in inherited[:details]:
                lines.append(f"  XFAIL    {r.provider} {r.case}: {_clipped(r.label())}")
            if len(inherited) > details:
                lines.append(f"  ... and {len(inherited) - details} more (see --json / --markdown)")
        bad = self.unexpected()
        if bad:
            lines += ["", f"unexpected results ({len(bad)}):"]
            for r in bad[:details]:
                lines.append(f"  {r.status.upper():<8} {r.provider} {r.case}: {_one_line(r)}")
            if len(bad) > details:
                lines.append(f"  ... and {len(bad) - details} more (see --json / --markdown)")
        lines += ["", "slowest cases:"]
        for r in self.slowest():
            lines.append(f"  {r.seconds:8.2f} s  {r.provider} {r.case} ({r.status})")
        return "\n".join(lines)

    def _headline(self) -> str:
        return (
            f"turnout conformance, mode {self.mode}, {len(self.results)} results "
            f"({', '.join(self.kinds)}) in {self.wall_seconds:.1f} s with {self.jobs} worker(s)"
            + (f" (+ {self.collect_seconds:.1f} s collecting)" if self.collect_seconds else "")
        )

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "providers": self.providers,
            "kinds": self.kinds,
            "pattern": self.pattern,
            "jobs": self.jobs,
            "wall_seconds": round(self.wall_seconds, 3),
            "collect_seconds": round(self.collect_seconds, 3),
            "meta": self.meta,
            "ok": self.ok,
            "summary": self.summary(),
            "by_op": self.by_op(),
            "slowest": [r.to_dict() for r in self.slowest()],
            "results": [r.to_dict() for r in self.results],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    # ------------------------------------------------------------------ Markdown
    def to_markdown(self) -> str:
        md = [f"# {self._headline()}", ""]
        if self.meta:
            md += [", ".join(f"{k} {v}" for k, v in self.meta.items()), ""]
        head = [c.replace("_", " ") for c in COLUMNS]
        md += ["## Summary", "", "| provider | " + " | ".join(head) + " |"]
        md.append("| --- |" + " ---: |" * len(COLUMNS))
        for p, counts in self.summary().items():
            md.append(f"| {p} | " + " | ".join(str(counts[c]) for c in COLUMNS) + " |")
        if self.mode == "fallback":
            md += ["", _FALLBACK_NOTE]
        md += ["", "## By op type", ""]
        if self.mode == "fallback":
            md.append(
                "Cell: passed/cases, then the other outcomes and how many cases the provider "
                "exercised (ran at least one node of)."
            )
        else:
            md.append(
                "Cell: passed/claimed, then the other outcomes (unclaimed cases are not claimed)."
            )
        md += ["", "| op | " + " | ".join(self.providers) + " |"]
        md.append("| --- |" + " --- |" * len(self.providers))
        fallback = self.mode == "fallback"
        for op, per in self.by_op().items():
            cells = (_cell(per.get(p, {}), fallback) for p in self.providers)
            md.append(f"| {op} | " + " | ".join(cells) + " |")
        bad = self.unexpected()
        if bad:
            md += ["", f"## Unexpected results ({len(bad)})", ""]
            md += ["| provider | case | status | message |", "| --- | --- | --- | --- |"]
            for r in bad:
                md.append(f"| {r.provider} | {r.case} | {r.status} | {_md(_one_line(r))} |")
        xfails = [r for r in self.results if r.status == "xfail"]
        if xfails:
            md += ["", f"## Expected failures ({len(xfails)})", ""]
            md += ["| provider | case | reason |", "| --- | --- | --- |"]
            for r in xfails:
                reason = r.label() if r.expected_from else r.expected or ""
                md.append(f"| {r.provider} | {r.case} | {_md(reason)} |")
        md += ["", "## Slowest cases", "", "| seconds | provider | case | status |"]
        md.append("| ---: | --- | --- | --- |")
        for r in self.slowest():
            md.append(f"| {r.seconds:.2f} | {r.provider} | {r.case} | {r.status} |")
        return "\n".join(md) + "\n"

    # ------------------------------------------------------------------ JUnit XML
    def to_junit(self) -> str:
        root = ET.Element("testsuites", name="turnout-conformance")
        for p in self.providers:
            mine = [r for r in self.results if r.provider == p]
            suite = ET.SubElement(
                root,
                "testsuite",
                name=f"turnout-conformance[{p}, {self.mode}]",
                tests=str(len(mine)),
                failures=str(sum(r.status in ("failed", "xpass") for r in mine)),
                errors=str(sum(r.status in ("crash", "timeout") for r in mine)),
                skipped=str(sum(r.status in ("unclaimed", "xfail") for r in mine)),
                time=f"{sum(r.seconds for r in mine):.3f}",
                hostname=platform.node(),
            )
            for r in mine:
                tc = ET.SubElement(
                    suite,
                    "testcase",
                    classname=f"{p}.{r.kind}",
                    name=r.case,
                    time=f"{r.seconds:.3f}",
                )
                if r.status == "failed":
                    ET.SubElement(tc, "failure", message=_one_line(r)[:500]).text = r.message
                elif r.status == "xpass":
                    ET.SubElement(
                        tc, "failure", message="unexpected pass: remove the expected-failure entry"
                    ).text = r.expected or ""
                elif r.status in ("crash", "timeout"):
                    ET.SubElement(
                        tc, "error", type=r.status, message=r.message[:500]
                    ).text = r.message
                elif r.status == "unclaimed":
                    ET.SubElement(tc, "skipped", message=f"unclaimed: {r.message[:500]}")
                elif r.status == "xfail":
                    ET.SubElement(
                        tc,
                        "skipped",
                        message=r.label() if r.expected_from else f"expected failure: {r.expected}",
                    )
        ET.indent(root)
        return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


_FALLBACK_NOTE = (
    "fallback mode: claimed = the provider ran every node of the case, exercised = at least "
    "one, not exercised = the CPU provider ran them all; inherited = failures in nodes the CPU "
    "provider ran, listed in its reviewed expected failures."
)


def _count(results: list[Result], columns: tuple[str, ...]) -> dict[str, int]:
    counts = dict.fromkeys(columns, 0)
    for r in results:
        counts["cases"] += 1
        counts[r.status] += 1
        counts["claimed"] += r.claimed
        counts["exercised"] += r.exercised
        counts["not_exercised"] += not r.exercised
        counts["inherited"] += bool(r.status == "xfail" and r.expected_from)
    return counts


def _cell(counts: dict[str, int], fallback: bool = False) -> str:
    """passed/claimed (isolated) or passed/cases (fallback), then the other outcomes."""
    if not counts:
        return ""
    total = counts["cases"] if fallback else counts["cases"] - counts.get("unclaimed", 0)
    text = f"{counts.get('passed', 0)}/{total}"
    extra = [f"{counts[s]} {s}" for s in STATUSES[1:] if counts.get(s)]
    if counts.get("inherited"):
        extra.append(f"{counts['inherited']} inherited")
    if fallback:
        extra.append(f"{counts['exercised']} exercised")
    return text + (" (" + ", ".join(extra) + ")" if extra else "")


def _clipped(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[: n - 4] + " ..."


def _one_line(r: Result) -> str:
    text = r.message or r.expected or ""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:300]


def _md(text: str) -> str:
    return text.replace("|", "\\|")
