"""What `turnout conformance` and `turnout compare` run: the core CLI parses the arguments and
calls these functions (so `turnout` does not need this package installed to start)."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["run_compare", "run_conformance"]


def run_conformance(args: argparse.Namespace) -> int:
    """Exit status 0 only when nothing unexpected happened (failure, crash, timeout, xpass)."""
    import onnx

    import turnout
    from turnout.sdk.plugins import registry

    from .cases import collect_cases, parse_kinds
    from .expected import ExpectedFailures, classify
    from .progress import make_progress
    from .report import Report
    from .runner import CPU, Result, Runner

    try:
        kinds = parse_kinds(args.kinds)
    except ValueError as e:
        print(f"turnout conformance: {e}", file=sys.stderr)
        return 2
    names = [n.strip() for item in args.provider or [] for n in item.split(",") if n.strip()]
    probes = probe_out_of_process()
    if names:
        factories = []
        for n in names:
            f = registry.resolve(n)  # InvalidArgument lists the installed providers
            ok, reason = probes.get(f.name) or _probe_here(f)
            if not ok:
                print(f"turnout conformance: {f.name} is not available: {reason}")
                return 2
            if f not in factories:
                factories.append(f)
    else:
        factories = [
            f
            for f in sorted(registry.all(), key=lambda f: -f.default_priority)
            if (probes.get(f.name) or _probe_here(f))[0]
        ]
    t_collect = time.perf_counter()
    cases = collect_cases(kinds, args.k)
    t_collect = time.perf_counter() - t_collect
    if not cases:
        print(f"turnout conformance: no case matches -k {args.k!r}", file=sys.stderr)
        return 2
    if getattr(args, "placement_times", False):
        from .placement import placement_times, to_text

        timed = [f.name for f in factories if f.name != CPU]
        print(to_text(placement_times(cases, timed, args.placement_budget)))
        return 0
    tasks = [(f.name, args.mode, i) for f in factories for i in range(len(cases))]
    expected = {f.name: ExpectedFailures(f.expected_failures()) for f in factories}
    # in fallback mode, failures in nodes the CPU provider ran fall under its reviewed list
    cpu = registry.resolve(CPU)
    inherited = {CPU: ExpectedFailures(cpu.expected_failures())} if args.mode == "fallback" else {}
    progress = make_progress(len(tasks), enabled=not args.quiet)

    def on_result(_: int, r: Result) -> None:
        classify(r, expected[r.provider], inherited)
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


_PROBE_SCRIPT = (
    "import json; from turnout.sdk.plugins import registry; "
    "print(json.dumps({f.name: [registry.probe(f).ok, registry.probe(f).reason] "
    "for f in registry.all()}))"
)


def probe_out_of_process() -> dict[str, tuple[bool, str | None]]:
    """Probe the installed providers in a child process.

    Probing initializes device runtimes (an OpenCL platform, a CUDA context); workers forked
    from a parent that did so inherit a runtime whose threads did not survive the fork and hang
    in their first device call. So the parent only learns the answers.
    """
    import json
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT], capture_output=True, text=True, timeout=300
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return {}
    return {name: (bool(ok), reason) for name, (ok, reason) in found.items()}


def _probe_here(factory: Any) -> tuple[bool, str | None]:
    """Providers registered in this process only (tests, apps) are probed here."""
    from turnout.sdk.plugins import registry

    availability = registry.probe(factory)
    return availability.ok, availability.reason
