"""Render a benchmark report (runner.run_benchmark's dict) as Markdown."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["to_markdown"]

COLUMNS = ("turnout_cpu", "turnout_numba", "onnxruntime", "reference")


def _ms(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.0f}"


def _ratio(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.2f}"


def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def _parity(cells: list[dict[str, Any]]) -> str:
    short = {"turnout_cpu": "cpu", "turnout_numba": "numba", "reference": "ref"}
    fails = []
    worst = 0.0
    for c in cells:
        p = c.get("parity_vs_onnxruntime")
        if p is None:
            continue
        worst = max(worst, p["max_abs"])
        if not p["pass"]:
            fails.append(f"{short[c['runtime']]} FAIL (abs {p['max_abs']:.1e}, "
                         f"rel {p['max_rel']:.1e})")  # fmt: skip
    if fails:
        return "; ".join(fails)
    return f"pass (abs ≤ {worst:.0e})" if any("parity_vs_onnxruntime" in c for c in cells) else "—"


def _table(report: dict[str, Any]) -> list[str]:
    threads = report["config"]["threads"]
    lines = [
        "| model | threads | turnout cpu ms | numba ms | ort ms | reference ms "
        "| cpu/ort | numba/ort | ref/ort | parity |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for m in report["models"]:
        for th in threads:
            med = {c["runtime"]: c for c in m["cells"] if c["threads"] == th}
            ref = next((c for c in m["cells"] if c["runtime"] == "reference"), None)
            ratios = m["ratios_to_onnxruntime"].get(str(th), {})
            show_ref = th == 1 and ref is not None
            if ref is not None and th == 1:
                ref_ms = _ms(ref["median_ms"])
            else:
                ref_ms = "skipped" if th == 1 and "reference" in m["skipped"] else "—"
            row = [
                m["name"],
                str(th),
                _ms(med.get("turnout_cpu", {}).get("median_ms")),
                _ms(med.get("turnout_numba", {}).get("median_ms")),
                _ms(med.get("onnxruntime", {}).get("median_ms")),
                ref_ms,
                _ratio(ratios.get("turnout_cpu")),
                _ratio(ratios.get("turnout_numba")),
                _ratio(ratios.get("reference")) if show_ref else "—",
                _parity(list(med.values()) + ([ref] if show_ref and th != 1 else [])),
            ]
            lines.append("| " + " | ".join(row) + " |")
    return lines


def to_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    out = ["# turnout benchmark", ""]
    out.append(
        f"{env['cpu']} ({env['cpu_count']} CPUs), {report['started']} → {report['finished']}, "
        f"load average {report['load_average_start']} → {report['load_average_end']}."
    )
    v = env["versions"]
    out.append("Versions: " + ", ".join(f"{k} {v[k]}" for k in v) + ".")
    blas = [b for b in env["blas"] if b.get("user_api") == "blas"]
    if blas:
        out.append(
            "BLAS: " + "; ".join(
                f"{b.get('internal_api')} {b.get('version')} kernel {b.get('architecture')}"
                for b in blas
            ) + "."
        )  # fmt: skip
    if env["blas_overrides_unset"]:
        out.append(f"Unset for this run: {env['blas_overrides_unset']}.")
    if env["blas_overrides_present"]:
        out.append(f"Still set (numbers may be slower than a user's machine): "
                   f"{env['blas_overrides_present']}.")  # fmt: skip
    cfg = report["config"]
    out.append(
        f"Median of interleaved runs ({cfg['repeat']} rounds; onnx.reference ≤ "
        f"{cfg['reference_repeat']} rounds, 1 thread). Ratios: runtime median / onnxruntime "
        f"median at the same thread count (lower is better). Parity vs onnxruntime at rtol "
        f"{report['tolerances']['rtol']}, atol {report['tolerances']['atol']}."
    )
    out += ["", *_table(report), ""]
    summ = report["summary"]
    out.append("Geometric means of ratios to onnxruntime:")
    out.append("")
    out.append("| threads | cpu/ort | numba/ort | ref/ort |")
    out.append("|---:|---:|---:|---:|")
    for th, g in summ["geomean_ratios_to_onnxruntime"].items():
        cols = [
            f"{g[rt]['geomean']:.2f} ({g[rt]['models']} models)" if rt in g else "—"
            for rt in ("turnout_cpu", "turnout_numba", "reference")
        ]
        out.append(f"| {th} | " + " | ".join(cols) + " |")
    out += ["", "Targets (issue 5):", ""]
    for name, t in summ["targets"].items():
        extra = f", above: {', '.join(t['above'])}" if t.get("above") else ""
        extra += f", worst: {t['worst']}" if "worst" in t else ""
        out.append(f"- {'met' if t['met'] else 'NOT met'}: {name}: {t['value']:.2f}{extra}")
    out += ["", "Session creation (seconds):", ""]
    out.append("| model | ort | turnout cpu | numba in-process | numba cold (child) "
               "| numba warm (child) | numba warm first run / steady |")  # fmt: skip
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for m in report["models"]:
        sc = m["session_creation"]
        th = cfg["threads"][0]
        cold = sc.get("turnout_numba_cold", {})
        warm = sc.get("turnout_numba_warm", {})
        steady = next((c["median_ms"] for c in m["cells"] if c["runtime"] == "turnout_numba"
                       and c["threads"] == warm.get("threads")), None)  # fmt: skip
        first = warm.get("first_run_s")
        fr = f"{first * 1e3 / steady:.2f}x" if first and steady else "—"
        out.append(
            f"| {m['name']} | {_s(sc.get(f'onnxruntime_{th}t_in_process_s'))} "
            f"| {_s(sc.get(f'turnout_cpu_{th}t_in_process_s'))} "
            f"| {_s(sc.get(f'turnout_numba_{th}t_in_process_s'))} "
            f"| {_s(cold.get('create_s'))} | {_s(warm.get('create_s'))} | {fr} |"
        )
    if any("memory" in m for m in report["models"]):
        out += ["", "Peak RSS (MiB, child process per runtime; model loaded → peak):", ""]
        out.append("| model | " + " | ".join(COLUMNS) + " |")
        out.append("|---|" + "---:|" * len(COLUMNS))
        for m in report["models"]:
            mem = m.get("memory", {})
            cells = []
            for rt in COLUMNS:
                d = mem.get(rt, {})
                if d.get("peak_rss_mib") is None:
                    cells.append(d.get("status") or "—")
                else:
                    cells.append(f"{d['rss_model_loaded_mib']:.0f} → {d['peak_rss_mib']:.0f}")
            out.append(f"| {m['name']} | " + " | ".join(cells) + " |")
    notes = [f"- {m['name']}: {n}" for m in report["models"] for n in m["notes"]]
    if notes:
        out += ["", "Notes:", "", *notes]
    profiles = [m for m in report["models"] if "profile" in m]
    if profiles:
        out += ["", "Where the numba session's time goes (turnout profiler, ms per run):", ""]
        for m in profiles:
            p = m["profile"]
            top = ", ".join(f"{k} {v:.2f}" for k, v in list(p["top_ops_ms"].items())[:6])
            out.append(
                f"- {m['name']} ({p['threads']}t): wall {p['wall_ms']:.2f}, in nodes "
                f"{p['node_ms']:.2f} over {p['steps_per_run']} steps; {top}"
            )
    return "\n".join(out) + "\n"
