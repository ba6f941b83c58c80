"""`python -m benchmarks startup`: what a fresh process waits for, turnout against onnxruntime.

    python -m benchmarks startup [--models a,b] [--rounds 3] [--threads 1] [--json F] [--markdown F]

Every measurement is a fresh interpreter that imports the runtime, creates one session with
`providers=["CPUExecutionProvider"]` (turnout with its default settings: the numpy tier first,
the compiled tier in the background), runs the model once, then runs it `STEADY_RUNS` times
(turnout after its compiled tier took over) and reports its peak RSS. turnout runs twice per
round: with the kernel cache warm (a warm-up process filled it) and with an empty one (a new
`TURNOUT_CACHE_DIR`; steady runs are not timed there: the compiler would be timed). Rounds
interleave the runtimes; the table gives medians and turnout / onnxruntime ratios with their
geometric means. turnout's bytecode is compiled first (`write_bytecode`), as `pip install`
leaves it: an editable install under PYTHONDONTWRITEBYTECODE would time its compilation.

Models: the benchmark zoo's (`benchmarks.zoo`, written to a temporary folder) and the real
models that installed applications carry in their wheels (`REAL_MODELS`: an audio, OCR,
detection, captcha, file-type and text model); those not installed are skipped with the reason.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STEADY_RUNS = 5
TIMEOUT_S = 900
WAIT_ENV = "TURNOUT_WAIT_FOR_COMPILED_TIER"  # turnout.engine.tiers'; not imported (fresh parent)


@dataclass(frozen=True)
class RealModel:
    """An ONNX file inside an installed package, and the inputs its application feeds."""

    kind: str
    package: str  # the import name whose folder holds the file (found without importing it)
    relative: str
    feeds: str  # a Python expression over `np` and `shapes` giving the feed dict, see _CHILD


REAL_MODELS = {
    "silero_vad": RealModel(
        "audio: voice activity",
        "silero_vad",
        "data/silero_vad.onnx",
        "{'input': np.zeros((1, 512), np.float32), 'state': np.zeros((2, 1, 128), np.float32),"
        " 'sr': np.array(16000, np.int64)}",
    ),
    "ppocr_det": RealModel(
        "OCR: text detection",
        "rapidocr_onnxruntime",
        "models/ch_PP-OCRv4_det_infer.onnx",
        "{n: rng.random((1, 3, 320, 320), np.float32) for n in shapes}",
    ),
    "ppocr_rec": RealModel(
        "OCR: text recognition",
        "rapidocr_onnxruntime",
        "models/ch_PP-OCRv4_rec_infer.onnx",
        "{n: rng.random((1, 3, 48, 320), np.float32) for n in shapes}",
    ),
    "ppocr_cls": RealModel(
        "OCR: text direction",
        "rapidocr_onnxruntime",
        "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "{n: rng.random((1, 3, 48, 192), np.float32) for n in shapes}",
    ),
    "nudenet_320n": RealModel(
        "detection",
        "nudenet",
        "320n.onnx",
        "{n: rng.random((1, 3, 320, 320), np.float32) for n in shapes}",
    ),
    "ddddocr_captcha": RealModel(
        "captcha OCR",
        "ddddocr",
        "common_old.onnx",
        "{n: rng.random((1, 1, 64, 160), np.float32) for n in shapes}",
    ),
    "magika": RealModel(
        "classification: file type",
        "magika",
        "models/standard_v3_3/model.onnx",
        "{'bytes': rng.integers(0, 256, (1, 2048)).astype(np.int32)}",
    ),
    "tashkeel": RealModel(
        "text: Arabic diacritizer",
        "piper",
        "tashkeel/model.onnx",
        "{'char_inputs': rng.integers(1, 30, (1, 64)), 'diac_inputs': np.zeros((1, 64), np.int64),"
        " 'input_lengths': np.array([64], np.int64)}",
    ),
}


def real_model_path(model: RealModel) -> Path | str:
    """The file, or why it is not there (a string)."""
    try:
        spec = importlib.util.find_spec(model.package)
    except (ImportError, ValueError) as e:
        return f"{model.package} cannot be found: {e}"
    if spec is None or not spec.submodule_search_locations:
        return f"{model.package} is not installed (pip install it to time its model)"
    path = Path(next(iter(spec.submodule_search_locations))) / model.relative
    return path if path.exists() else f"{model.package} has no {model.relative}"


# The child: one fresh interpreter, one runtime, one model. Prints one JSON line.
_CHILD = r"""
import json, statistics, sys, time
spec = json.loads(sys.argv[1])
t0 = time.perf_counter()
if spec["runtime"] == "onnxruntime":
    import onnxruntime as rt
else:
    import turnout as rt
t_import = time.perf_counter() - t0
t1 = time.perf_counter()  # the options count as session creation: they are part of it
so = rt.SessionOptions()
so.intra_op_num_threads = spec["threads"]
if spec["runtime"] == "onnxruntime":
    so.inter_op_num_threads = 1
sess = rt.InferenceSession(spec["path"], so, providers=["CPUExecutionProvider"])
t_session = time.perf_counter() - t1
import numpy as np
rng = np.random.default_rng(0)
shapes = {i.name: i.shape for i in sess.get_inputs()}
feeds = eval(spec["feeds"])
t2 = time.perf_counter()
sess.run(None, feeds)
t_first = time.perf_counter() - t2
steady = None
if spec["steady"]:
    if spec["runtime"] != "onnxruntime":
        sess._engine.adopt_compiled_tier()
    times = []
    for _ in range(spec["steady"]):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    steady = statistics.median(times)
tier = None
if spec["runtime"] != "onnxruntime" and sess.partition_report().tier is not None:
    tier = sess.partition_report().tier.tier
# VmHWM: this process's own peak (ru_maxrss would start at the forking parent's)
with open("/proc/self/status") as f:
    rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
print(json.dumps({"import": t_import, "session": t_session, "first": t_first,
                  "steady": steady, "rss": rss, "tier_at_end": tier}))
"""


# Import names of the distributions a turnout session may import (found, never imported here).
TURNOUT_PACKAGES = ("turnout", "turnout_numba", "turnout_opencl", "turnout_cupy")


def write_bytecode(packages: tuple[str, ...] = TURNOUT_PACKAGES) -> list[str]:
    """Compile the installed turnout packages' bytecode as `pip install` does; the folders done.

    An editable install (this repository's venv) writes no bytecode at install, and with
    PYTHONDONTWRITEBYTECODE set none at import either: every child would compile turnout's
    sources again (about 80 ms for a small model's session) while onnxruntime's wheel brings its
    bytecode. The README's `pip install` compiles it, so that is what is measured.
    """
    done = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        for folder in spec.submodule_search_locations:
            compileall.compile_dir(folder, quiet=1)
            done.append(folder)
    return done


def run_child(source: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """Run `source` in a fresh interpreter with `spec` as its JSON argument and this repository
    on its path; its last stdout line, as JSON, or {"error": its last stderr line}."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**env, "PYTHONPATH": os.pathsep.join([root, env.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", source, json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _child(spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    return run_child(_CHILD, spec, env)


MODES = ("onnxruntime", "turnout_warm", "turnout_empty")
METRICS = ("import", "session", "first", "startup", "steady", "rss")


def measure(
    name: str, path: Path, feeds: str, threads: int, rounds: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """Every mode's samples for one model (rounds interleaved), plus medians."""
    base = {k: v for k, v in os.environ.items() if k != WAIT_ENV}
    spec = {"path": str(path), "feeds": feeds, "zoo": name, "threads": threads}
    with tempfile.TemporaryDirectory(prefix="turnout-startup-") as tmp:
        warm_cache = str(Path(tmp) / "warm")
        warm_env = {**base, "TURNOUT_CACHE_DIR": warm_cache}
        _child({**spec, "runtime": "turnout", "steady": 0}, {**warm_env, WAIT_ENV: "1"})
        samples: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for r in range(rounds):
            samples["onnxruntime"].append(
                _child({**spec, "runtime": "onnxruntime", "steady": STEADY_RUNS}, base)
            )
            samples["turnout_warm"].append(
                _child({**spec, "runtime": "turnout", "steady": STEADY_RUNS}, warm_env)
            )
            empty_env = {**base, "TURNOUT_CACHE_DIR": str(Path(tmp) / f"empty{r}")}
            samples["turnout_empty"].append(
                _child({**spec, "runtime": "turnout", "steady": 0}, empty_env)
            )
            say(f"  {name} round {r + 1}/{rounds}")
    return {"samples": samples, "medians": {m: _medians(s) for m, s in samples.items()}}


def _medians(samples: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [s["error"] for s in samples if "error" in s]
    if errors:
        return {"error": errors[0]}
    out: dict[str, Any] = {}
    for key in ("import", "session", "first", "steady", "rss"):
        values = [s[key] for s in samples if s.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    out["startup"] = statistics.median(s["import"] + s["session"] + s["first"] for s in samples)
    return out


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


# (table column, turnout mode, metric): each compared with onnxruntime's same metric
COLUMNS = (
    ("import", "turnout_warm", "import"),
    ("session, warm cache", "turnout_warm", "session"),
    ("first run, warm", "turnout_warm", "first"),
    ("import+session+first, warm", "turnout_warm", "startup"),
    ("import+session+first, empty cache", "turnout_empty", "startup"),
    ("steady run (compiled tier)", "turnout_warm", "steady"),
    ("peak RSS, warm", "turnout_warm", "rss"),
)


def markdown(results: dict[str, Any]) -> str:
    """One row per model: turnout / onnxruntime for each column; the geomean row last."""
    head = "| model | " + " | ".join(c for c, _, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    ratios: dict[str, list[float]] = {c: [] for c, _, _ in COLUMNS}
    for name, res in results.items():
        med = res["medians"]
        cells = []
        for column, mode, metric in COLUMNS:
            ort, tn = med["onnxruntime"].get(metric), med[mode].get(metric)
            if "error" in med[mode] or "error" in med["onnxruntime"] or not ort or tn is None:
                cells.append("error" if "error" in med[mode] else "")
                continue
            ratio = tn / ort
            ratios[column].append(ratio)
            unit = (
                f"{tn / 2**20:.0f} / {ort / 2**20:.0f} MB"
                if metric == "rss"
                else (f"{tn * 1000:.0f} / {ort * 1000:.0f} ms")
            )
            cells.append(f"{ratio:.2f} ({unit})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append(
        "| **geomean** | "
        + " | ".join(f"**{geomean(ratios[c]):.2f}**" for c, _, _ in COLUMNS)
        + " |"
    )
    return "\n".join(lines)


def model_files(models: str | None, tmp: Path) -> list[tuple[str, Path, str]]:
    """(name, file, feeds expression) per model of the comma-separated `models` (default: the
    zoo's and the installed real models); zoo models and their inputs are written to `tmp`."""
    from benchmarks import zoo

    wanted = models.split(",") if models else [*zoo.names(), *REAL_MODELS]
    out = []
    for name in wanted:
        if name in REAL_MODELS:
            found = real_model_path(REAL_MODELS[name])
            if isinstance(found, str):
                print(f"skipped {name}: {found}", file=sys.stderr)
                continue
            out.append((name, found, REAL_MODELS[name].feeds))
            continue
        import numpy as np
        import onnx

        path = tmp / f"{name}.onnx"
        model = zoo.get(name).build()
        onnx.save(model, path)
        # the inputs made here: a child that loaded the model to make them would hold its
        # weights once more at its peak
        inputs = tmp / f"{name}.npz"
        np.savez(inputs, **zoo.model_feeds(name, model))
        out.append((name, path, f"dict(np.load({str(inputs)!r}))"))
    return out


def emit(
    table: str, results: dict[str, Any], markdown_path: str | None, json_path: str | None
) -> None:
    """Print the table; write it and every sample where the options ask."""
    print(table)
    if markdown_path:
        Path(markdown_path).write_text(table + "\n")
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks startup", description=__doc__)
    p.add_argument("--models", help="comma-separated zoo or real model names (default: all)")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per mode and model")
    p.add_argument("--threads", type=int, default=1, help="intra_op_num_threads of both")
    p.add_argument("--json", help="write every sample here")
    p.add_argument("--markdown", help="write the table here")
    args = p.parse_args(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    for folder in write_bytecode():
        say(f"bytecode compiled as pip install does: {folder}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="turnout-startup-models-") as tmp:
        for name, path, feeds in model_files(args.models, Path(tmp)):
            results[name] = measure(name, path, feeds, args.threads, max(1, args.rounds), say)
    emit(markdown(results), results, args.markdown, args.json)
    return 0
