"""Rendering a PartitionReport as Graphviz DOT and as a self-contained HTML page."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turnout.engine.partition import Assignment, PartitionReport
    from turnout.graph.ir import Graph

__all__ = ["placement_lines", "placement_summary", "to_dot", "to_html"]

_PALETTE = ("#8ecae6", "#ffb703", "#90be6d", "#f28482", "#b8b8ff", "#f4a261", "#cdb4db")


def _colors(report: PartitionReport) -> dict[str, str]:
    names = sorted(set(report.providers) | set(report.counts()))
    return {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(names)}


def _q(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def to_dot(report: PartitionReport, graph: Graph | None = None) -> str:
    """Nodes coloured by provider; edges from the graph when given; copies as dashed boxes."""
    colors = _colors(report)
    lines = [f"digraph {_q(report.graph)} {{", "  rankdir=TB;", "  node [style=filled, shape=box];"]
    for a in report.assignments:
        label = f"{a.node}{a.suffix_note()}\\n{a.op_type}\\n{a.provider}"
        lines.append(f"  {_q(a.node)} [label={_q(label)}, fillcolor={_q(colors[a.provider])}];")
    if graph is not None:
        producer = {y: n.name for n in graph.nodes for y in n.outputs if y}
        copied = {(c["value"], c["dst"]) for c in report.copies}
        device_of = {a.node: a.provider for a in report.assignments}
        for n in graph.nodes:
            for x in n.inputs:
                if x in producer:
                    style = ""
                    if (
                        any(v == x for v, _ in copied)
                        and device_of[producer[x]] != device_of[n.name]
                    ):
                        style = " [style=dashed, label=copy]"
                    lines.append(f"  {_q(producer[x])} -> {_q(n.name)}{style};")
    lines.append("  subgraph cluster_legend { label=providers;")
    for p, c in colors.items():
        lines.append(f"    {_q('legend ' + p)} [label={_q(p)}, fillcolor={_q(c)}];")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def _suffix_mark(a: Assignment) -> str:
    """The mark of a node name that turnout suffixed at load, as HTML ("" for the others)."""
    note = a.suffix_note()
    return f"<small>{html.escape(note)}</small>" if note else ""


def to_html(report: PartitionReport) -> str:
    """One page, no external assets: counts, every node's placement, copies and declines."""
    colors = _colors(report)
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(a.node)}{_suffix_mark(a)}</td><td>{esc(a.op_type)}</td>"
        f'<td style="background:{colors[a.provider]}">{esc(a.provider)}</td>'
        f"<td>{esc(a.source)}</td><td>{esc(a.group or '')}</td></tr>"
        for a in report.assignments
    )
    counts = "".join(
        f'<li><span style="background:{colors[p]}">&nbsp;&nbsp;&nbsp;</span> {esc(p)}: {n}</li>'
        for p, n in sorted(report.counts().items())
    )
    copies = "".join(
        f"<tr><td>{esc(c['value'])}</td><td>{esc(c['src'])}</td><td>{esc(c['dst'])}</td>"
        f"<td>{esc(', '.join(c['consumers']))}</td></tr>"
        for c in report.copies
    )
    declines = "".join(
        f"<tr><td>{esc(p)}</td><td>{esc(d['node'])}</td><td>{esc(d['reason'])}</td></tr>"
        for p, ds in report.declines.items()
        for d in ds
    )
    subs = "".join(
        f"<details><summary>{esc(k)}</summary>{to_html(v)}</details>"
        for k, v in report.subgraphs.items()
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>turnout partition: {esc(report.graph)}</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}</style></head><body>"
        f"<h1>Partition of {esc(report.graph)}</h1>"
        f"<p>providers in priority order: {esc(', '.join(report.providers))}</p>"
        f"<ul>{counts}</ul><p>copies inserted: {len(report.copies)}</p>"
        "<h2>Nodes</h2><table><tr><th>node</th><th>op</th><th>provider</th><th>how</th>"
        f"<th>group</th></tr>{rows}</table>"
        "<h2>Copies</h2><table><tr><th>value</th><th>from</th><th>to</th><th>consumers</th></tr>"
        f"{copies}</table>"
        "<h2>Declines</h2><table><tr><th>provider</th><th>node</th><th>reason</th></tr>"
        f"{declines}</table>{_placement_html(report.placement)}{subs}</body></html>"
    )


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "not timed"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _candidate(row: dict[str, Any]) -> str:
    """One candidate as the reports show it: kernel time (a group's, with its size), the
    copies choosing it causes, and why it was not timed."""
    kernel = _time(row["kernel_s"])
    if row["group_size"] > 1:
        kernel += f" for its group of {row['group_size']}"
    note = f" ({row['note']})" if row["note"] and row["kernel_s"] is None else ""
    return f"{row['provider']} {kernel}{note} + copies {_time(row['copy_s'])}"


def placement_lines(placement: dict[str, Any] | None, node: str) -> list[str]:
    """Measured placement's line for one node (none for a node one provider claims)."""
    entry = (placement or {}).get("nodes", {}).get(node)
    if entry is None or len(entry["candidates"]) < 2:
        return []
    cands = "; ".join(_candidate(r) for r in entry["candidates"])
    return [f"measured: {cands} -> {entry['winner']}: {entry['reason']}"]


def placement_summary(placement: dict[str, Any] | None) -> str:
    """One line: the policy, what was timed or read from the cache, and the plans' costs."""
    if not placement:
        return ""
    plans = placement.get("plans", {})
    compared = ", ".join(
        f"{k} {_time(v)}" for k, v in plans.items() if isinstance(v, float) and k != "measured"
    )
    source = (
        "times from the placement cache"
        if placement["from_cache"]
        else f"{placement['timed']} kernels timed in {placement['timing_s']:.2f} s "
        f"(budget {placement['budget_s']:g} s)"
    )
    return (
        f"placement: measured, {source}; planned kernels {_time(placement['kernel_s'])} + "
        f"copies {_time(placement['copy_s'])} (plans compared: {compared})"
    )


def _placement_html(placement: dict[str, Any] | None) -> str:
    if not placement:
        return ""
    esc = html.escape
    rows = []
    for node, entry in placement["nodes"].items():
        if len(entry["candidates"]) < 2:
            continue
        cands = "<br>".join(esc(_candidate(r)) for r in entry["candidates"])
        rows.append(
            f"<tr><td>{esc(node)}</td><td>{cands}</td><td>{esc(entry['winner'])}</td>"
            f"<td>{esc(entry['reason'])}</td></tr>"
        )
    return (
        f"<h2>Measured placement</h2><p>{esc(placement_summary(placement))}</p>"
        "<table><tr><th>node</th><th>candidates (kernel + copies)</th><th>winner</th>"
        f"<th>why</th></tr>{''.join(rows)}</table>"
    )
