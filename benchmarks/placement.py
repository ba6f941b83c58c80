"""`python -m benchmarks placement`: measured placement against priority and the CPU path.

    python -m benchmarks placement [--models a,b] [--providers opencl,numba,CPUExecutionProvider]
                                   [--seconds 2] [--budget 600] [--json F] [--markdown F]

Issue 33's comparison, one fresh process per model: three sessions of the model,
- `cpu`: `providers=["CPUExecutionProvider"]` (turnout-numba serving it, its compiled tier
  waited for);
- `priority`: the `--providers` list, each node on the first provider that claims it;
- `measured`: the same list with `session.turnout.placement = measured`, its placement cache
  warmed first (a cold session, whose timing pass is reported, in a cache folder of its own);
then creation times (priority, measured with a warm placement cache, and priority with the
list less its device providers, alternated, 3 each)
and steady runs of the three sessions, interleaved, each for `--seconds` per round (at least
one run after one warm-up). Reported: the median run of each, measured / min(priority, cpu),
and the creation times.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.startup import emit, geomean, run_child

DEVICE_PROVIDERS = ["opencl", "OpenCLExecutionProvider", "cupy", "CuPyExecutionProvider"]
"""Names in `--providers` left out of the host list (the kernels measured placement builds)."""

_CHILD = r"""
import json, os, statistics, sys, time
spec = json.loads(sys.argv[1])
os.environ["TURNOUT_WAIT_FOR_COMPILED_TIER"] = "1"
import turnout
from benchmarks import zoo
model = zoo.get(spec["zoo"]).build()
data = model.SerializeToString()
feeds = zoo.model_feeds(spec["zoo"], model)
listed = spec["providers"]

def session(placement, providers):
    so = turnout.SessionOptions()
    so.placement = placement
    so.add_session_config_entry("session.turnout.placement_budget_s", str(spec["budget"]))
    so.fallback = "allow"
    t = time.perf_counter()
    sess = turnout.InferenceSession(data, so, providers=providers)
    return sess, time.perf_counter() - t

cpu, _ = session("priority", ["CPUExecutionProvider"])
cold, cold_s = session("measured", listed)
record = cold.partition_report().placement
del cold
create = {"priority": [], "measured": [], "host": []}
host = [p for p in listed if p not in spec["devices"]]
sessions = {"cpu": cpu}
places = []
for r in range(3):
    order = ("priority", "measured", "host") if r % 2 == 0 else ("host", "measured", "priority")
    for name in order:
        policy, chosen = ("priority", host) if name == "host" else (name, listed)
        made, took = session(policy, chosen)
        create[name].append(took)
        if name == "host":
            continue
        sessions[name] = made
        if name == "measured":
            places.append(made.partition_report().placement["place_s"])
warm = sessions["measured"].partition_report().placement
times = {k: [] for k in sessions}
for sess in sessions.values():
    sess.run(None, feeds)
for r in range(spec["rounds"]):
    for name, sess in sessions.items():
        t0 = time.perf_counter()
        while not times[name] or time.perf_counter() - t0 < spec["seconds"]:
            t = time.perf_counter()
            sess.run(None, feeds)
            times[name].append(time.perf_counter() - t)
            if len(times[name]) >= 200:
                break
out = {
    "run": {k: statistics.median(v) for k, v in times.items()},
    "runs": {k: len(v) for k, v in times.items()},
    "create": {k: statistics.median(v) for k, v in create.items()},
    "cold_create": cold_s,
    "timed": record["timed"],
    "timing_s": record["timing_s"],
    "warm_timed": warm["timed"],
    "warm_place_s": statistics.median(places),
    "counts": {k: s.partition_report().counts() for k, s in sessions.items()},
}
print(json.dumps(out))
"""


def measure(name: str, args: argparse.Namespace, cache: str) -> dict[str, Any]:
    spec = {"zoo": name, "providers": args.providers.split(","), "budget": args.budget,
            "seconds": args.seconds, "rounds": args.rounds,
            "devices": DEVICE_PROVIDERS}  # fmt: skip
    env = {**os.environ, "TURNOUT_CACHE_DIR": cache}
    return run_child(_CHILD, spec, env)


def _share_kernel_cache(root: Path) -> None:
    """A placement cache of its own under `root` (every cold pass is cold), with the user's
    compiled-kernel cache linked in (numba does not compile again)."""
    from turnout.sdk.cache_dir import cache_root

    kernels = cache_root() / "numba"
    kernels.mkdir(parents=True, exist_ok=True)
    (root / "numba").symlink_to(kernels, target_is_directory=True)


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """Steady runs (ms) and measured / the better of priority and the CPU path; creation (s)
    of priority and of measured with a warm placement cache, measured / priority, the warm
    placement step alone and the same list without its device providers (the kernels measured
    placement builds here), and the cold timing pass."""
    head = (
        "| model | cpu ms | priority ms | measured ms | measured / best | "
        "create priority s | create measured, warm cache s | ratio | of which placing s | "
        "create host list s | cold timing pass s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    ratios: list[float] = []
    creates: list[float] = []
    for name, res in results.items():
        if "error" in res:
            lines.append(f"| {name} | error: {res['error'][:80]} |")
            continue
        run, create = res["run"], res["create"]
        best = min(run["cpu"], run["priority"])
        ratios.append(run["measured"] / best)
        creates.append(create["measured"] / create["priority"])
        host = create.get("host")
        lines.append(
            f"| {name} | {run['cpu'] * 1e3:.2f} | {run['priority'] * 1e3:.2f} | "
            f"{run['measured'] * 1e3:.2f} | {run['measured'] / best:.2f} | "
            f"{create['priority']:.3f} | {create['measured']:.3f} | "
            f"{create['measured'] / create['priority']:.2f} | "
            f"{res.get('warm_place_s', float('nan')):.3f} | "
            f"{host if host is None else f'{host:.3f}'} | {res['timing_s']:.1f} |"
        )
    if ratios:
        lines.append(
            f"| **geomean** | | | | **{geomean(ratios):.2f}** (max {max(ratios):.2f}) | | | "
            f"**{geomean(creates):.2f}** (max {max(creates):.2f}) | | | |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks placement", description=__doc__)
    p.add_argument("--models", help="comma-separated zoo model names (default: all)")
    p.add_argument("--providers", default="opencl,numba,CPUExecutionProvider")
    p.add_argument("--seconds", type=float, default=1.0, help="timed runs per round (s)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    p.add_argument("--budget", type=float, default=600.0, help="the timing pass's budget (s)")
    p.add_argument("--json", help="write every result here")
    p.add_argument("--markdown", help="write the table here")
    args = p.parse_args(argv)
    from benchmarks import zoo

    names = args.models.split(",") if args.models else zoo.names()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="turnout-placement-cache-") as cache:
        _share_kernel_cache(Path(cache))
        for name in names:
            results[name] = measure(name, args, cache)
            print(f"  {name}: {results[name]}", file=sys.stderr, flush=True)
    emit(markdown(results), results, args.markdown, args.json)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
