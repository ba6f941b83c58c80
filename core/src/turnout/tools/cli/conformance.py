"""`turnout conformance`: the ONNX backend tests against installed providers (needs the
`turnout-conformance` distribution; this module only parses the arguments)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

KINDS = "node,simple,pytorch-converted,pytorch-operator,light,turnout"
ADVICE = "pip install ./conformance  (from a turnout checkout: the turnout-conformance package)"


def load_conformance(module: str) -> Any:
    """Import `turnout_conformance.<module>` lazily; None (after saying how to get it) if absent."""
    try:
        return importlib.import_module(f"turnout_conformance.{module}")
    except ModuleNotFoundError as e:
        if e.name is None or not e.name.startswith("turnout_conformance"):
            raise
        print(f"turnout: this command needs turnout-conformance: {ADVICE}", file=sys.stderr)
        return None


def _cmd(args: argparse.Namespace) -> int:
    cli = load_conformance("cli")
    return 2 if cli is None else int(cli.run_conformance(args))


def register(sub: Any) -> None:
    p = sub.add_parser(
        "conformance",
        help="run the ONNX backend tests against providers (needs turnout-conformance)",
    )
    p.add_argument(
        "--provider",
        action="append",
        default=[],
        metavar="NAME",
        help="provider name or alias; repeatable or comma-separated (default: all that probe OK)",
    )
    p.add_argument(
        "--mode",
        choices=("isolated", "fallback"),
        default="isolated",
        help="isolated: only the provider, declined cases are 'unclaimed'; "
        "fallback: the provider first, CPU for the rest, every case must pass",
    )
    p.add_argument("-k", metavar="PATTERN", help="only cases whose name matches this regex")
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per case (default 180)")
    p.add_argument("--kinds", default=KINDS, help=f"comma-separated case kinds (default {KINDS})")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the report as Markdown")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML (one testsuite per provider)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    p.add_argument(
        "--placement-times",
        action="store_true",
        help="instead of checking results: per op, where each provider's kernels win and lose "
        "against the CPU host path, timed by measured placement (node cases)",
    )
    p.add_argument(
        "--placement-budget",
        type=float,
        default=10.0,
        help="with --placement-times: each case's timing budget in seconds (default 10)",
    )
    p.set_defaults(func=_cmd)
