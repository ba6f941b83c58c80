"""Reports of a conformance run: per-provider summary, a table per op type, the slowest cases;
as text, JSON, Markdown and JUnit XML."""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from .runner import Result

__all__ = ["STATUSES", "UNEXPECTED", "Report"]

STATUSES = ("passed", "failed", "unclaimed", "crash", "timeout", "xfail", "xpass")
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
        """provider -> counts: cases, claimed, and one entry per status."""
        out: dict[str, dict[str, int]] = {}
        for p in self.providers:
            counts = dict.fromkeys(("cases", "claimed", *STATUSES), 0)
            for r in self.results:
                if r.provider == p:
                    counts["cases"] += 1
                    counts[r.status] += 1
            counts["claimed"] = counts["cases"] - counts["unclaimed"]
            out[p] = counts
        return out

    def by_op(self) -> dict[str, dict[str, dict[str, int]]]:
        """op type -> provider -> status counts."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for r in self.results:
            per = out.setdefault(r.op, {}).setdefault(r.provider, {})
            per[r.status] = per.get(r.status, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))

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
        cols = ("cases", "claimed", *STATUSES)
        lines.append(f"{'provider':<{width}}  " + " ".join(f"{c:>9}" for c in cols))
        for p, counts in self.summary().items():
            lines.append(f"{p:<{width}}  " + " ".join(f"{counts[c]:>9}" for c in cols))
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
        cols = ("cases", "claimed", *STATUSES)
        md += ["## Summary", "", "| provider | " + " | ".join(cols) + " |"]
        md.append("| --- |" + " ---: |" * len(cols))
        for p, counts in self.summary().items():
            md.append(f"| {p} | " + " | ".join(str(counts[c]) for c in cols) + " |")
        md += ["", "## By op type", ""]
        md.append(
            "Cell: passed/claimed, then the other outcomes (unclaimed cases are not claimed)."
        )
        md += ["", "| op | " + " | ".join(self.providers) + " |"]
        md.append("| --- |" + " --- |" * len(self.providers))
        for op, per in self.by_op().items():
            md.append(
                f"| {op} | " + " | ".join(_cell(per.get(p, {})) for p in self.providers) + " |"
            )
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
                md.append(f"| {r.provider} | {r.case} | {_md(r.expected or '')} |")
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
                    ET.SubElement(tc, "skipped", message=f"expected failure: {r.expected or ''}")
        ET.indent(root)
        return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _cell(counts: dict[str, int]) -> str:
    if not counts:
        return ""
    claimed = sum(v for k, v in counts.items() if k != "unclaimed")
    text = f"{counts.get('passed', 0)}/{claimed}"
    extra = [f"{counts[s]} {s}" for s in STATUSES[1:] if counts.get(s)]
    return text + (" (" + ", ".join(extra) + ")" if extra else "")


def _one_line(r: Result) -> str:
    text = r.message or r.expected or ""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:300]


def _md(text: str) -> str:
    return text.replace("|", "\\|")
