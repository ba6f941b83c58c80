"""`python -m benchmarks alone`: steady runs of each runtime alone in a fresh process, at the
default thread count and at fixed counts, on a quiet machine and beside a busy process.

    python -m benchmarks alone [--models a,b] [--threads default,1,2] [--rounds 2] [--busy]
                               [--seconds 2] [--json F] [--markdown F]

Why alone: in one process, onnxruntime's pool spins after each run and takes the other core
from the next runtime's run, so interleaved runs at 2 threads are not a fair measure. Here every
cell is a fresh interpreter running one runtime on one model at one thread setting (`default`
leaves `intra_op_num_threads` unset, as most applications do): a session (turnout waits for its
compiled tier), warm-up runs, then runs for `--seconds`; it reports the median run and the CPU
time per wall time of the timed runs. Rounds alternate the runtimes.

`--busy` runs every cell a second time with a CPU-bound loop in another process (one core of a
2-core machine taken): the slowdown is busy / quiet per runtime, and the table compares
turnout's slowdown with onnxruntime's.

Models: the zoo's and the real models of installed applications (`startup.REAL_MODELS`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.startup import emit, geomean, model_files, run_child

RUNTIMES = ("onnxruntime", "turnout")
WARMUP_RUNS = 5

_CHILD = r"""
import json, os, statistics, sys, time
spec = json.loads(sys.argv[1])
os.environ["TURNOUT_WAIT_FOR_COMPILED_TIER"] = "1"
if spec["runtime"] == "onnxruntime":
    import onnxruntime as rt
else:
    import turnout as rt
so = rt.SessionOptions()
if spec["threads"]:
    so.intra_op_num_threads = spec["threads"]
sess = rt.InferenceSession(spec["path"], so, providers=["CPUExecutionProvider"])
import numpy as np
rng = np.random.default_rng(0)
shapes = {i.name: i.shape for i in sess.get_inputs()}
feeds = eval(spec["feeds"])
for _ in range(spec["warmup"]):
    sess.run(None, feeds)
times = []
cpu0, wall0 = time.process_time(), time.perf_counter()
while len(times) < 5 or time.perf_counter() - wall0 < spec["seconds"]:
    t = time.perf_counter()
    sess.run(None, feeds)
    times.append(time.perf_counter() - t)
cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
out = {"median": statistics.median(times), "runs": len(times), "cpu_per_wall": cpu / wall}
print(json.dumps(out))
"""


@contextmanager
def busy_neighbour(on: bool) -> Iterator[None]:
    """A CPU-bound loop in another process while the block runs (when `on`)."""
    if not on:
        yield
        return
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        loop.kill()
        loop.wait()


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    return run_child(_CHILD, spec, dict(os.environ))


def measure(
    name: str, path: Path, feeds: str, threads: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Samples per (runtime, quiet|busy) for one model and thread setting, rounds alternated."""
    spec = {"path": str(path), "feeds": feeds, "zoo": name, "threads": threads,
            "seconds": args.seconds, "warmup": WARMUP_RUNS}  # fmt: skip
    modes = ("quiet", "busy") if args.busy else ("quiet",)
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {
        rt: {m: [] for m in modes} for rt in RUNTIMES
    }
    for r in range(args.rounds):
        order = RUNTIMES if r % 2 == 0 else RUNTIMES[::-1]
        for mode in modes:
            for rt in order:
                with busy_neighbour(mode == "busy"):
                    samples[rt][mode].append(_child({**spec, "runtime": rt}))
    return samples


def _median(samples: list[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in samples if key in s]
    return statistics.median(values) if values and len(values) == len(samples) else None


def _label(threads: int) -> str:
    return "default" if threads == 0 else f"{threads}t"


def _summary(ratios: list[float]) -> str:
    return f"**{geomean(ratios):.2f}** (max {max(ratios):.2f})" if ratios else ""


def _row(name: str, s: dict[str, Any], busy: bool, ratios: list[float], slow: list[float]) -> str:
    """One model's cells; its ratios are appended to `ratios` and `slow`."""
    o = _median(s["onnxruntime"]["quiet"], "median")
    t = _median(s["turnout"]["quiet"], "median")
    if o is None or t is None:
        return f"| {name} | error |"
    ratios.append(t / o)
    oc = _median(s["onnxruntime"]["quiet"], "cpu_per_wall") or 0.0
    tc = _median(s["turnout"]["quiet"], "cpu_per_wall") or 0.0
    row = f"| {name} | {o * 1e3:.2f} | {t * 1e3:.2f} | {t / o:.2f} | {oc:.2f}, {tc:.2f} |"
    if not busy:
        return row
    ob = _median(s["onnxruntime"]["busy"], "median")
    tb = _median(s["turnout"]["busy"], "median")
    if ob is None or tb is None:
        return row + " error | | |"
    slow_o, slow_t = ob / o, tb / t
    slow.append(slow_t / slow_o)
    return row + f" {slow_o:.2f} | {slow_t:.2f} | {slow_t / slow_o:.2f} |"


def markdown(results: dict[str, dict[int, Any]], busy: bool) -> str:
    """Per thread setting, one row per model: medians and turnout / onnxruntime; with --busy,
    each runtime's slowdown beside a busy process and turnout's against onnxruntime's."""
    blocks = []
    for threads in sorted({t for per in results.values() for t in per}):
        head = "| model | onnxruntime ms | turnout ms | ratio | CPU/wall ort, turnout |"
        if busy:
            head += " busy slowdown ort | busy slowdown turnout | slowdown ratio |"
        lines = [f"**{_label(threads)}**", "", head, "|" + "---|" * (head.count("|") - 1)]
        ratios: list[float] = []
        slow: list[float] = []
        for name, per in results.items():
            if threads in per:
                lines.append(_row(name, per[threads], busy, ratios, slow))
        geo = f"| **geomean** | | | {_summary(ratios)} | |"
        lines.append(geo + (f" | | {_summary(slow)} |" if busy else ""))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks alone", description=__doc__)
    p.add_argument("--models", help="comma-separated zoo or real model names (default: all)")
    p.add_argument("--threads", default="default,1,2",
                   help="comma-separated: default (unset), or a count")  # fmt: skip
    p.add_argument("--rounds", type=int, default=2, help="fresh processes per cell")
    p.add_argument("--seconds", type=float, default=2.0, help="timed runs per process (s)")
    p.add_argument("--busy", action="store_true", help="also beside a CPU-bound process")
    p.add_argument("--json", help="write every sample here")
    p.add_argument("--markdown", help="write the tables here")
    args = p.parse_args(argv)
    settings = [0 if t.strip() == "default" else int(t) for t in args.threads.split(",")]
    results: dict[str, dict[int, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="turnout-alone-models-") as tmp:
        for name, path, feeds in model_files(args.models, Path(tmp)):
            results[name] = {}
            for threads in settings:
                results[name][threads] = measure(name, path, feeds, threads, args)
                print(f"  {name} {_label(threads)} done", file=sys.stderr, flush=True)
    emit(markdown(results, args.busy), results, args.markdown, args.json)
    return 0
