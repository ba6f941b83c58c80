"""`turnout explain MODEL --providers A,B [--placement measured]`: where every node runs, why,
and what is copied; with measured placement, each node's candidates, their measured kernel
times, the copies each would cause and why the winner won."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _cmd_explain(args: argparse.Namespace) -> int:
    from turnout.api.options import SessionOptions
    from turnout.api.session import InferenceSession
    from turnout.engine.placement import BUDGET_KEY
    from turnout.tools.cli.run import _resolve_model

    providers = args.providers.split(",") if args.providers else None
    so = SessionOptions()
    so.fallback = "allow"  # explain reports fallbacks instead of warning or refusing
    so.placement = args.placement
    if args.budget is not None:
        so.add_session_config_entry(BUDGET_KEY, str(args.budget))
    sess = InferenceSession(_resolve_model(args.model), so, providers=providers)
    sess._engine.adopt_compiled_tier()  # where the nodes run once the host has compiled
    report = sess.partition_report()
    if args.format == "json":
        text = report.to_json()
    elif args.format == "dot":
        text = report.to_dot(sess._engine.graph)
    elif args.format == "html":
        text = report.to_html()
    else:
        counts = ", ".join(f"{p}: {n}" for p, n in sorted(report.counts().items()))
        uploads = sum(bool(c.get("once")) for c in report.copies)
        fell = report.fallbacks("CPUExecutionProvider")
        text = "\n".join(
            [
                report.to_text(),
                "",
                f"nodes per provider: {counts}",
                f"copies each run: {len(report.copies) - uploads}, "
                f"one-time uploads of initializers: {uploads}",
                f"nodes that fell back to CPUExecutionProvider: {len(fell)}",
                *_provenance(sess),
            ]
        )
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text + "\n")
    return 0


def _provenance(sess: Any) -> list[str]:
    """The nodes the optimizer wrote, each with the original nodes it stands for."""
    lines = sess.optimization_report().format_provenance()
    return (
        ["", "nodes the optimizer wrote (<- the model's nodes they replace):", *lines]
        if lines
        else []
    )


def register(sub: Any) -> None:
    p = sub.add_parser("explain", help="show which provider runs each node, and why")
    p.add_argument("model", help="path to a .onnx file, or a shipped model name (tiny-cnn)")
    p.add_argument("--providers", help="comma-separated provider names, in priority order")
    p.add_argument(
        "--placement",
        choices=("priority", "measured"),
        default="priority",
        help="priority: the first provider that claims a node runs it; measured: where the "
        "measured plan (kernels and copies) is fastest",
    )
    p.add_argument("--budget", type=float, help="measured: the timing pass's budget (seconds)")
    p.add_argument("--format", choices=("text", "json", "dot", "html"), default="text")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(func=_cmd_explain)
