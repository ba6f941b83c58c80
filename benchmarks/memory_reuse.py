"""Peak memory with and without buffer reuse (`SessionOptions.enable_mem_reuse`).

For each model, two fresh processes run it once with profiling: one releasing each
intermediate after its last reader (the default), one keeping all of them to the end. Each
reports the profile's peak of live intermediate bytes and the process's RSS high-water mark.

    python -m benchmarks.memory_reuse [--models bert_like,resnet50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import onnx

from . import zoo

_CHILD = """
import json, sys
import numpy as np, onnx, turnout
from benchmarks import zoo
name, path, reuse = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
opts = turnout.SessionOptions()
opts.enable_mem_reuse = reuse
opts.enable_profiling = True
opts.profile_file_prefix = sys.argv[4]
sess = turnout.InferenceSession(path, opts)
feeds = zoo.model_feeds(name, onnx.load(path, load_external_data=False), 0)
sess.run(None, feeds)
with open(sess.end_profiling()) as f:
    trace = json.load(f)
events = trace["traceEvents"] if isinstance(trace, dict) else trace
peak = [e["args"]["bytes"] for e in events if e.get("name") == "peak_memory"][0]
hwm = 0.0
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
print(json.dumps({"peak_bytes": peak, "rss_hwm_mib": hwm}))
"""


def _child(name: str, path: Path, reuse: bool, prefix: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                         env.get("PYTHONPATH", "")])  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, name, str(path), "1" if reuse else "0", str(prefix)],
        env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return dict(json.loads(lines[-1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="bert_like,resnet50")
    args = p.parse_args(argv)
    print("| model | peak live, reuse | peak live, no reuse | RSS high-water, reuse "
          "| RSS high-water, no reuse |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="turnout-mem-") as tmp:
        for name in [n.strip() for n in args.models.split(",") if n.strip()]:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(zoo.get(name).build(), path)
            on = _child(name, path, True, Path(tmp) / "p")
            off = _child(name, path, False, Path(tmp) / "p")
            if "error" in on or "error" in off:
                print(f"| {name} | {on.get('error', '')} | {off.get('error', '')} | | |")
                continue
            mib = lambda d: sum(d["peak_bytes"].values()) / 2**20  # noqa: E731
            print(f"| {name} | {mib(on):.1f} MiB | {mib(off):.1f} MiB | "
                  f"{on['rss_hwm_mib']:.0f} MiB | {off['rss_hwm_mib']:.0f} MiB |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
