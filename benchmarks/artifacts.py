"""Compiled models against compiling afresh: session creation in fresh processes.

For each model, with the numba provider: a session created from the plain model with a cold
cache (a new TURNOUT_CACHE_DIR) and then with that warm cache; `turnout compile` of the model;
a session created from the compiled model with an empty cache and with a warm one; and the
compiled model loaded with other provider options (stale: refused). Each child reports its
creation time and how many kernels numba compiled.

    python -m benchmarks.artifacts [--models resnet50,crnn_ocr_like]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx

from . import zoo

REPO = Path(__file__).resolve().parent.parent

_CHILD = """
import json, sys, time
t = time.perf_counter()
import turnout, turnout_numba.cache as cache
imported = time.perf_counter() - t
providers = [("numba", json.loads(sys.argv[2]))]
t = time.perf_counter()
try:
    sess = turnout.InferenceSession(sys.argv[1], providers=providers)
except turnout.Fail as e:
    print(json.dumps({"fail": str(e)}))
    raise SystemExit(0)
print(json.dumps({"create_s": time.perf_counter() - t, "import_s": imported,
                  "compiles": cache.compile_count()}))
"""


def _child(model: Path, cache: Path, options: str = "{}") -> dict[str, Any]:
    env = {**os.environ, "TURNOUT_CACHE_DIR": str(cache)}
    env.pop("TURNOUT_CPU_NUMPY_ONLY", None)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(model), options],
        env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return dict(json.loads(lines[-1]))


def _compile(model: Path, out: Path, cache: Path) -> float:
    env = {**os.environ, "TURNOUT_CACHE_DIR": str(cache)}
    env.pop("TURNOUT_CPU_NUMPY_ONLY", None)
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "turnout", "compile", str(model), "-o", str(out),
         "--providers", "numba", "--require"],
        env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"turnout compile {model.name} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - t


def measure(name: str, work: Path) -> dict[str, Any]:
    model = work / f"{name}.onnx"
    onnx.save(zoo.get(name).build(), model)
    compiled = work / f"{name}_ctx.onnx"
    row: dict[str, Any] = {"model": name}
    row["plain_cold"] = _child(model, work / f"{name}-cold")
    row["plain_warm"] = _child(model, work / f"{name}-cold")
    row["compile_s"] = _compile(model, compiled, work / f"{name}-compile")
    row["artifact_empty_cache"] = _child(compiled, work / f"{name}-empty")
    row["artifact_warm_cache"] = _child(compiled, work / f"{name}-empty")
    row["artifact_stale"] = _child(compiled, work / f"{name}-stale", '{"fuse": 0}')
    row["artifact_mib"] = sum(p.stat().st_size for p in work.glob(f"{name}_ctx.onnx*")) / 2**20
    return row


def table(rows: list[dict[str, Any]]) -> str:
    def cell(d: dict[str, Any]) -> str:
        if "error" in d:
            return f"error: {d['error']}"
        return f"{d['create_s']:.2f} s ({d['compiles']} compiled)"

    out = [
        "| model | plain, cold cache | plain, warm cache | artifact, empty cache "
        "| artifact, warm cache | stale artifact | artifact size |",
        "|---|---|---|---|---|---|---:|",
    ]
    for r in rows:
        stale = "refused" if "fail" in r["artifact_stale"] else f"ran: {r['artifact_stale']}"
        out.append(
            f"| {r['model']} | {cell(r['plain_cold'])} | {cell(r['plain_warm'])} | "
            f"{cell(r['artifact_empty_cache'])} | {cell(r['artifact_warm_cache'])} | {stale} "
            f"| {r['artifact_mib']:.1f} MiB |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,crnn_ocr_like")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="turnout-artifacts-") as tmp:
        rows = [measure(n.strip(), Path(tmp)) for n in args.models.split(",") if n.strip()]
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
