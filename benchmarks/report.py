"""Render a benchmark report (runner.run_benchmark's dict) as Markdown."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["to_markdown"]

COLUMNS = ("turnout_cpu", "turnout_cpu_numpy", "turnout_numba", "onnxruntime", "reference")
SHORT = {
    "turnout_cpu": "cpu",
    "turnout_cpu_numpy": "cpu numpy",
    "turnout_numba": "numba",
    "onnxruntime": "ort",
    "reference": "ref",
}
TURNOUT = ("turnout_cpu", "turnout_cpu_numpy", "turnout_numba")


def _ms(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.0f}"


def _ratio(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.2f}"


def _s(x: float | None) -> str:
    """Seconds: two decimals, three below 0.1 s (onnxruntime creates small models in ms)."""
    return "—" if x is None else f"{x:.3f}" if x < 0.1 else f"{x:.2f}"


def _parity(cells: list[dict[str, Any]]) -> str:
    fails = []
    worst = 0.0
    for c in cells:
        p = c.get("parity_vs_onnxruntime")
        if p is None:
            continue
        worst = max(worst, p["max_abs"])
        if not p["pass"]:
            fails.append(f"{SHORT[c['runtime']]} FAIL (abs {p['max_abs']:.1e}, "
                         f"rel {p['max_rel']:.1e})")  # fmt: skip
    if fails:
        return "; ".join(fails)
    return f"pass (abs ≤ {worst:.0e})" if any("parity_vs_onnxruntime" in c for c in cells) else "—"


def _table(report: dict[str, Any]) -> list[str]:
    threads = report["config"]["threads"]
    ms_cols = [f"{SHORT[rt]} ms" for rt in COLUMNS]
    ratio_cols = [f"{SHORT[rt]}/ort" for rt in COLUMNS if rt != "onnxruntime"]
    lines = [
        "| model | threads | " + " | ".join(ms_cols + ratio_cols) + " | parity |",
        "|---|---:|" + "---:|" * (len(ms_cols) + len(ratio_cols)) + "---|",
    ]
    for m in report["models"]:
        for th in threads:
            med = {c["runtime"]: c for c in m["cells"] if c["threads"] == th}
            ref = next((c for c in m["cells"] if c["runtime"] == "reference"), None)
            ratios = m["ratios_to_onnxruntime"].get(str(th), {})
            show_ref = th == 1 and ref is not None
            row = [m["name"], str(th)]
            for rt in COLUMNS:
                if rt != "reference":
                    row.append(_ms(med.get(rt, {}).get("median_ms")))
                elif show_ref and ref is not None:
                    row.append(_ms(ref["median_ms"]))
                else:
                    row.append("skipped" if th == 1 and "reference" in m["skipped"] else "—")
            for rt in COLUMNS:
                if rt != "onnxruntime":
                    show = rt != "reference" or show_ref
                    row.append(_ratio(ratios.get(rt)) if show else "—")
            row.append(_parity(list(med.values())))
            lines.append("| " + " | ".join(row) + " |")
    return lines


def _placement(report: dict[str, Any]) -> list[str]:
    """Where CPUExecutionProvider's nodes ran, per model (turnout_cpu vs the numpy switch)."""
    out = []
    for rt in ("turnout_cpu", "turnout_cpu_numpy"):
        seen: dict[str, list[str]] = {}
        for m in report["models"]:
            c = next((c for c in m["cells"] if c["runtime"] == rt and "placement" in c), None)
            if c is not None:
                where = ", ".join(f"{p} {n}" for p, n in c["placement"].items())
                seen.setdefault(where, []).append(m["name"])
        if seen:
            parts = [f"{w} ({len(ms)} models)" if len(seen) > 1 else w for w, ms in seen.items()]
            out.append(f"{rt} nodes ran on: " + "; ".join(parts) + ".")
    return out


def _creation_tables(report: dict[str, Any]) -> list[str]:
    from .runner import first_run_ratios

    cfg = report["config"]
    th = cfg["threads"][0]
    rts = [rt for rt in COLUMNS if rt != "reference" and rt in cfg["runtimes"]]
    out = ["", f"Session creation in-process ({th} thread; seconds) and first run in-process "
           "(x the steady median):", ""]  # fmt: skip
    out.append("| model | " + " | ".join(f"{SHORT[rt]} create" for rt in rts) + " | "
               + " | ".join(f"{SHORT[rt]} first" for rt in rts) + " |")  # fmt: skip
    out.append("|---|" + "---:|" * (2 * len(rts)))
    for m in report["models"]:
        ip = m["session_creation"].get("in_process_s", {})
        create = [_s(ip.get(rt, {}).get(str(th))) for rt in rts]
        first = [_x(first_run_ratios(m, rt)["in_process"]) for rt in rts]
        out.append(f"| {m['name']} | " + " | ".join(create + first) + " |")
    child = [m for m in report["models"] if m["session_creation"].get("warm")]
    if not child:
        return out
    cth = child[0]["session_creation"].get("child_threads")
    out += ["", f"Session creation in a fresh process ({cth} threads; seconds): turnout cpu with "
            "a cold cache, then every runtime with that warm cache; first run of the warm "
            "process (x the steady median):", ""]  # fmt: skip
    out.append("| model | cpu cold | " + " | ".join(f"{SHORT[rt]} warm" for rt in rts)
               + " | cpu/ort warm | " + " | ".join(f"{SHORT[rt]} first" for rt in rts)
               + " |")  # fmt: skip
    out.append("|---|---:|" + "---:|" * (2 * len(rts) + 1))
    creation = report["summary"].get("session_creation_ratio_warm", {})
    for m in child:
        sc = m["session_creation"]
        warm = sc["warm"]
        cells = [_s(sc.get("cold", {}).get("create_s"))]
        cells += [_s(warm.get(rt, {}).get("create_s")) if warm.get(rt, {}).get("status") == "ok"
                  else (warm.get(rt, {}).get("status") or "—") for rt in rts]  # fmt: skip
        cells.append(_ratio(creation.get(m["name"])))
        cells += [_x(first_run_ratios(m, rt)["warm_child"]) for rt in rts]
        out.append(f"| {m['name']} | " + " | ".join(cells) + " |")
    return out


def _x(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.2f}x"


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
    out += ["", *_table(report), "", *_placement(report)]
    torch = env.get("torch")
    if torch:
        out.append(f"torch {torch['version']} imported first ({torch['num_threads']} thread).")
    out.append("")
    summ = report["summary"]
    out.append("Geometric means of ratios to onnxruntime:")
    out.append("")
    rts = [rt for rt in COLUMNS if rt != "onnxruntime"]
    out.append("| threads | " + " | ".join(f"{SHORT[rt]}/ort" for rt in rts) + " |")
    out.append("|---:|" + "---:|" * len(rts))
    for th, g in summ["geomean_ratios_to_onnxruntime"].items():
        cols = [
            f"{g[rt]['geomean']:.2f} ({g[rt]['models']} models)" if rt in g else "—" for rt in rts
        ]
        out.append(f"| {th} | " + " | ".join(cols) + " |")
    for issue in (13, 5):
        targets = {k: t for k, t in summ["targets"].items() if t.get("issue") == issue}
        if not targets:
            continue
        out += ["", f"Targets (issue {issue}):", ""]
        for name, t in targets.items():
            extra = f", above: {', '.join(t['above'])}" if t.get("above") else ""
            extra += f", worst: {t['worst']}" if "worst" in t else ""
            extra += f", {t['models']} models" if "models" in t else ""
            out.append(f"- {'met' if t['met'] else 'NOT met'}: {name}: {t['value']:.2f}{extra}")
    out += _creation_tables(report)
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
        out += ["", "Where the turnout sessions' time goes (turnout profiler, ms per run):", ""]
        for m in profiles:
            for rt, p in m["profile"].items():
                top = ", ".join(f"{k} {v:.2f}" for k, v in list(p["top_ops_ms"].items())[:6])
                out.append(
                    f"- {m['name']} {SHORT[rt]} ({p['threads']}t): wall {p['wall_ms']:.2f}, in "
                    f"nodes {p['node_ms']:.2f} over {p['steps_per_run']} steps; {top}"
                )
    return "\n".join(out) + "\n"
