"""docs/conformance-matrix.md, generated: the isolated node suite and the fallback run of every
kind, for the CPU, numba and OpenCL providers, as one page.

    python -m turnout_conformance.matrix docs/conformance-matrix.md

Each run is `turnout conformance ... --markdown` in a child process (the same command a reader
can rerun); its headings move two levels down under the page's title. The exit status is that
of the runs: not 0 when either reported something unexpected (the page is written anyway).
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["RUNS", "main", "render"]

RUNS: tuple[tuple[str, ...], ...] = (
    ("--mode", "isolated", "--kinds", "node"),
    ("--mode", "fallback"),
)
"""The arguments of each run, after the providers and the worker count."""

_HEADER = """\
# Conformance matrices

Produced on {machine} on {date}{commit}
with `python -m turnout_conformance.matrix`, which runs:

{commands}

Regenerate them after kernel changes; they are a record, not a test (CI runs the tests).
"""


def _command(providers: str, jobs: int, run: Sequence[str]) -> list[str]:
    return ["turnout", "conformance", "--provider", providers, *run, "-j", str(jobs)]


def _commit() -> str:
    """ ", at commit abc1234" for the checkout this runs in, or nothing outside git."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f", at commit {done.stdout.strip()}"


def render(
    reports: Sequence[str], commands: Sequence[Sequence[str]], machine: str, commit: str = ""
) -> str:
    """The page: the header naming the commands, then each run's markdown one level below."""
    shown = "\n".join(f"    {' '.join(c)} --markdown ..." for c in commands)
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    parts = [_HEADER.format(machine=machine, date=date, commit=commit, commands=shown)]
    for text in reports:
        demoted = [("##" + line) if line.startswith("#") else line for line in text.splitlines()]
        parts.append("\n".join(demoted).strip() + "\n")
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m turnout_conformance.matrix")
    parser.add_argument("output", type=Path, help="the page to write")
    parser.add_argument("--provider", default="cpu,numba,opencl")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("-k", dest="pattern", help="only cases matching this regex (a quick check)")
    parser.add_argument(
        "--machine", default="the 2-core development machine", help="where it ran, for the page"
    )
    args = parser.parse_args(argv)
    pick = ("-k", args.pattern) if args.pattern else ()
    commands = [_command(args.provider, args.jobs, (*run, *pick)) for run in RUNS]
    reports, status = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, command in enumerate(commands):
            md = Path(tmp) / f"run{i}.md"
            argv_run = [sys.executable, "-m", "turnout", *command[1:], "-q", "--markdown", str(md)]
            done = subprocess.run(argv_run, check=False)
            if not md.exists():
                said = f"{' '.join(command)} wrote no report (exit {done.returncode})"
                print(said, file=sys.stderr)
                return done.returncode or 1
            status = status or done.returncode
            reports.append(md.read_text(encoding="utf-8"))
    args.output.write_text(render(reports, commands, args.machine, _commit()), encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())
