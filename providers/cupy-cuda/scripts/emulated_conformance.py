"""`turnout conformance` on the emulated provider (numpy in place of CuPy, no GPU): the same
runner, modes and report as the GPU check's conformance step, for what this machine can show.
It checks the provider's claims and kernel logic, not CUDA.

    python emulated_conformance.py [turnout conformance options, e.g. --mode isolated -j 2]
"""

from __future__ import annotations

import argparse
import sys

from turnout.sdk.plugins import registry
from turnout_conformance.cli import run_conformance
from turnout_cupy.emulated import EMULATED_NAME, EmulatedFactory


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("isolated", "fallback"), default="isolated")
    ap.add_argument("-k", default=None)
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--kinds", default="node")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--junit")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    registry.register(EmulatedFactory())  # forked workers inherit it
    args.provider = [EMULATED_NAME]
    return run_conformance(args)


if __name__ == "__main__":
    sys.exit(main())
