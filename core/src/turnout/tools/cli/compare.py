"""`turnout compare MODEL --providers A,B`: every intermediate value that differs between two
providers (or a provider and `reference`, onnx.reference), first divergence first (needs the
`turnout-conformance` distribution; this module only parses the arguments)."""

from __future__ import annotations

import argparse
from typing import Any

from turnout.tools.cli.conformance import load_conformance


def _cmd(args: argparse.Namespace) -> int:
    cli = load_conformance("cli")
    return 2 if cli is None else int(cli.run_compare(args))


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="find where two providers' intermediate values diverge (needs turnout-conformance)",
    )
    p.add_argument("model", help="path to a .onnx file")
    p.add_argument(
        "--providers",
        required=True,
        metavar="A,B",
        help="two provider names or aliases; B may be 'reference' (onnx.reference)",
    )
    p.add_argument(
        "--inputs",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME=FILE.npy",
        help="input values (the others are random, see --seed)",
    )
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--atol", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    p.add_argument("--limit", type=int, default=50, help="differences to list (default 50)")
    p.set_defaults(func=_cmd)
