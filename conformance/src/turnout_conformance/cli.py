"""What `turnout conformance` and `turnout compare` run: the core CLI parses the arguments and
calls these functions (so `turnout` does not need this package installed to start)."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

__all__ = ["run_compare", "run_conformance"]


def run_conformance(args: argparse.Namespace) -> int:
    """Exit status 0 only when nothing unexpected happened (failure, crash, timeout, xpass)."""
    import onnx

    import turnout
    from turnout.plugins import registry

    from .cases import collect_cases, parse_kinds
    from .expected import ExpectedFailures, apply
    from .progress import make_progress
    from .report import Report
    from .runner import Result, Runner

    try:
        kinds = parse_kinds(args.kinds)
    except ValueError as e:
        print(f"turnout conformance: {e}", file=sys.stderr)
        return 2
    names = [n.strip() for item in args.provider or [] for n in item.split(",") if n.strip()]
    if names:
        factories = []
        for n in names:
            f = registry.resolve(n)  # InvalidArgument lists the installed providers
            avail = registry.probe(f)
            if not avail.ok:
                print(f"turnout conformance: {f.name} is not available: {avail.reason}")
                return 2
            if f not in factories:
                factories.append(f)
    else:
        factories = registry.available()
    t_collect = time.perf_counter()
    cases = collect_cases(kinds, args.k)
    t_collect = time.perf_counter() - t_collect
    if not cases:
        print(f"turnout conformance: no case matches -k {args.k!r}", file=sys.stderr)
        return 2
    tasks = [(f.name, args.mode, i) for f in factories for i in range(len(cases))]
    expected = {f.name: ExpectedFailures(f.expected_failures()) for f in factories}
    progress = make_progress(len(tasks), enabled=not args.quiet)

    def on_result(_: int, r: Result) -> None:
        entry = expected[r.provider].match(r.case, r.kind)
        if entry is not None:
            r.expected = entry[1]
            r.status = apply(r.status, entry)
        progress.update(r)

    t0 = time.perf_counter()
    try:
        results = Runner(cases, args.jobs, args.timeout, spec=(kinds, args.k)).run(tasks, on_result)
    finally:
        progress.close()
    report = Report(
        results,
        mode=args.mode,
        providers=[f.name for f in factories],
        kinds=list(kinds),
        wall_seconds=time.perf_counter() - t0,
        jobs=args.jobs,
        pattern=args.k,
        collect_seconds=t_collect,
        meta={
            "turnout": turnout.__version__,
            "onnx": onnx.__version__,
            "python": platform.python_version(),
            "cpus": str(os.cpu_count()),
        },
    )
    for path, text in ((args.json, report.to_json), (args.markdown, report.to_markdown)):
        if path:
            Path(path).write_text(text(), encoding="utf-8")
    if args.junit:
        Path(args.junit).write_text(report.to_junit(), encoding="utf-8")
    print(report.to_text())
    return 0 if report.ok else 1


def run_compare(args: argparse.Namespace) -> int:
    """Exit status 1 when some intermediate value differs beyond tolerance."""
    from .compare import compare_model, load_inputs

    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    if len(providers) != 2:
        print("turnout compare: --providers takes exactly two names: A,B", file=sys.stderr)
        return 2
    feeds = load_inputs(args.inputs or [])
    result = compare_model(
        args.model, providers[0], providers[1], feeds, args.rtol, args.atol, args.seed
    )
    print(result.to_text(limit=args.limit))
    return 0 if not result.diffs else 1
