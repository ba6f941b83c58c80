"""Benchmark runner: turnout (CPU; numba+CPU), onnxruntime and onnx.reference on the zoo, same run.

For each model every (runtime, thread count) cell gets a session, two warm-up runs (the first is
recorded as the first-run latency, the second gives the outputs compared for parity), then
`repeat` interleaved rounds: each round times a block of runs of every cell in turn (the order
rotates per round), so that load from other work on the machine spreads over all runtimes
alike. A block is as many runs as fit in `block_s` (at least one), so fast models get many
samples. Before each block the runner sleeps `settle_s`: after a run, OpenBLAS's workers spin
for about 0.1 s (2^28 cycles) and onnxruntime's pool spins too, so without a pause each runtime
ran its block on cores the other was still spinning on. Measured at 2 threads on 2 cores
(resnet50, densenet121, squeezenet, mlp): onnxruntime took 2x to 3x longer than alone, numba
1.2x to 1.7x, which made the 2-thread ratios look better than they are.

- onnx.reference runs at one thread only (BLAS limited to 1), for fewer rounds; a probe run in a
  child process decides first whether one run fits in `reference_limit_s`, else it is skipped
  and the report says so.
- Threads: onnxruntime gets `intra_op_num_threads` (inter 1); turnout runs under a threadpoolctl
  BLAS limit of the same count; the numba provider gets the `intra_op_num_threads` option.
- Session creation for numba with a cold cache (fresh TURNOUT_CACHE_DIR) and a warm one (same
  directory, new process) is measured in child processes, so numba's in-memory caches cannot
  help; peak RSS (`--memory`) likewise, one child per runtime and model.

`run_benchmark(config)` returns the report as a dict of plain values (report.py renders it).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import BLAS_OVERRIDES, blas_overrides_unset
from . import zoo as bench_zoo

__all__ = ["RUNTIMES", "Config", "main", "parity", "run_benchmark"]

RUNTIMES = ("turnout_cpu", "turnout_numba", "onnxruntime", "reference")
BASELINE = "onnxruntime"
NUMBA = "NumbaExecutionProvider"
RTOL, ATOL = 1e-3, 1e-5  # the onnx node tests' default tolerances
REPO = Path(__file__).resolve().parents[1]


@dataclass
class Config:
    models: list[str] = field(default_factory=lambda: bench_zoo.names())
    threads: list[int] = field(default_factory=lambda: [1, 2])
    repeat: int = 10  # interleaved rounds per model
    reference_repeat: int = 3  # rounds onnx.reference takes part in (at most)
    reference_limit_s: float = 60.0  # skip onnx.reference when one run takes longer
    reference_budget_s: float = 30.0  # fewer reference rounds when they would take longer
    block_s: float = 0.05  # time per block of consecutive runs of one cell
    settle_s: float = 0.3  # pause before each block: the last runtime's spinning threads sleep
    max_block: int = 200
    runtimes: list[str] = field(default_factory=lambda: list(RUNTIMES))
    creation: bool = True  # cold/warm numba session creation in child processes
    memory: bool = False  # peak RSS, one child process per runtime and model
    profile: bool = False  # per-op time of the numba session (turnout's profiler)
    seed: int = 0
    log: Callable[[str], None] | None = None


# ---------------------------------------------------------------------------- runtimes
def _blas_limit(threads: int) -> contextlib.AbstractContextManager[Any]:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: BLAS keeps its own thread count
        return contextlib.nullcontext()
    limit: contextlib.AbstractContextManager[Any] = threadpool_limits(
        limits=threads, user_api="blas"
    )
    return limit


def _numba_providers(threads: int) -> list[Any]:
    return [(NUMBA, {"intra_op_num_threads": threads}), "CPUExecutionProvider"]


def make_session(runtime: str, model: bytes | str, threads: int, profile_prefix: str = "") -> Any:
    """A session of `runtime`; `.run(None, feeds)` runs it (threads as documented above)."""
    if runtime == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    if runtime == "reference":
        import onnx
        from onnx.reference import ReferenceEvaluator

        proto = onnx.load_model_from_string(model) if isinstance(model, bytes) else model
        return ReferenceEvaluator(proto)
    import turnout

    opts = turnout.SessionOptions()
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    if runtime == "turnout_cpu":
        return turnout.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    if runtime == "turnout_numba":
        return turnout.InferenceSession(model, opts, providers=_numba_providers(threads))
    raise ValueError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")


def _run_context(runtime: str, threads: int) -> contextlib.AbstractContextManager[Any]:
    if runtime == "onnxruntime":
        return contextlib.nullcontext()  # its own thread pool; no BLAS
    return _blas_limit(1 if runtime == "reference" else threads)


# ---------------------------------------------------------------------------- parity
def parity(got: Sequence[Any], expected: Sequence[Any]) -> dict[str, Any]:
    """Max abs/rel error of `got` vs `expected` and pass/fail at rtol 1e-3, atol 1e-5.

    rel error is |got - expected| / max(|expected|, atol) so that near-zero values do not make
    it infinite; NaNs must sit in the same places; shapes and dtypes must match.
    """
    max_abs = max_rel = 0.0
    ok = len(got) == len(expected)
    why = "" if ok else f"{len(got)} outputs, expected {len(expected)}"
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape or g.dtype != e.dtype:
            ok, why = False, f"got {g.dtype}{list(g.shape)}, expected {e.dtype}{list(e.shape)}"
            continue
        if e.dtype.kind not in "fc":
            if not np.array_equal(g, e):
                ok, why = False, "values differ"
            continue
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        nan_g, nan_e = np.isnan(g64), np.isnan(e64)
        if not np.array_equal(nan_g, nan_e):
            ok, why = False, "NaNs differ"
        fin = ~(nan_g | nan_e)
        if not fin.any():
            continue
        with np.errstate(all="ignore"):
            diff = np.abs(g64[fin] - e64[fin])
            diff[np.isnan(diff)] = 0.0  # the same infinity on both sides
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / np.maximum(np.abs(e64[fin]), ATOL)).max()))
            if not (diff <= ATOL + RTOL * np.abs(e64[fin])).all():
                ok, why = False, why or "outside rtol 1e-3, atol 1e-5"
    return {"max_abs": max_abs, "max_rel": max_rel, "pass": ok, "why": why}


# ---------------------------------------------------------------------------- child processes
def _child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run `python -m benchmarks.runner --child SPEC` and return its JSON answer."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(spec.pop("env", {}))
    cmd = [sys.executable, "-m", "benchmarks.runner", "--child", json.dumps(spec)]
    try:
        cp = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "reason": f"no answer within {timeout:.0f} s"}
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("{")]
    if cp.returncode != 0 or not lines:
        tail = (cp.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"status": "error", "reason": f"exit {cp.returncode}: {tail}"}
    return dict(json.loads(lines[-1]))


def _peak_rss_mib() -> float:
    """This process's RSS high-water mark. /proc's VmHWM where there is one: on Linux
    getrusage's ru_maxrss is inherited through fork/exec from the (bigger) parent process."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    kib = 1 if sys.platform != "darwin" else 1024  # ru_maxrss: KiB on Linux, bytes on macOS
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kib / 1024


def _child_main(spec: dict[str, Any]) -> None:
    """In the child: create a session (timed), run it, report times / peak RSS / outputs."""
    rss0 = _peak_rss_mib()
    t = time.perf_counter()
    if spec["runtime"].startswith("turnout"):
        import turnout  # noqa: F401

        if spec["runtime"] == "turnout_numba":
            import turnout_numba  # noqa: F401
    elif spec["runtime"] == "onnxruntime":
        import onnxruntime  # noqa: F401
    else:
        import onnx.reference
    import_s = time.perf_counter() - t
    import onnx

    model = onnx.load(spec["model_path"])
    feeds = bench_zoo.feeds(model, spec.get("seed", 0))
    rss_ready = _peak_rss_mib()
    t = time.perf_counter()
    sess = make_session(spec["runtime"], spec["model_path"], spec["threads"])
    create_s = time.perf_counter() - t
    runs = []
    with _run_context(spec["runtime"], spec["threads"]):
        for _ in range(spec.get("runs", 1)):
            t = time.perf_counter()
            sess.run(None, feeds)
            runs.append(time.perf_counter() - t)
    answer = {
        "status": "ok",
        "import_s": import_s,
        "create_s": create_s,
        "runs_s": runs,
        "rss_before_model_mib": rss0,
        "rss_model_loaded_mib": rss_ready,
        "peak_rss_mib": _peak_rss_mib(),
    }
    print(json.dumps(answer), flush=True)


# ---------------------------------------------------------------------------- environment
def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("turnout", "turnout-numba", "numba", "numpy", "onnx", "onnxruntime", "llvmlite"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def blas_info() -> list[dict[str, Any]]:
    """Which BLAS (and OpenMP) libraries are loaded and with which kernel (threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"error": "threadpoolctl is not installed"}]
    keys = ("user_api", "internal_api", "prefix", "version", "architecture", "num_threads")
    return [{k: d.get(k) for k in keys} for d in threadpool_info()]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    try:
        import numba

        numba_layer = getattr(numba.config, "THREADING_LAYER", "?")
        numba_threads = getattr(numba.config, "NUMBA_NUM_THREADS", 0)
    except ImportError:
        numba_layer, numba_threads = "n/a", 0
    return {
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "versions": _versions(),
        "blas": blas_info(),
        "blas_overrides_unset": blas_overrides_unset(),
        "blas_overrides_present": {k: os.environ[k] for k in BLAS_OVERRIDES if k in os.environ},
        "numba_threading_layer": numba_layer,
        "numba_num_threads": numba_threads,
    }


# ---------------------------------------------------------------------------- measuring
@dataclass
class _Cell:
    runtime: str
    threads: int
    session: Any
    create_s: float
    first_run_ms: float = 0.0
    outputs: Any = None
    block: int = 1
    rounds: int = 0
    samples_ms: list[float] = field(default_factory=list)


def _time_block(cell: _Cell, feeds: dict[str, Any]) -> None:
    run = cell.session.run
    with _run_context(cell.runtime, cell.threads):
        for _ in range(cell.block):
            t = time.perf_counter_ns()
            run(None, feeds)
            cell.samples_ms.append((time.perf_counter_ns() - t) / 1e6)


def _reference_probe(cfg: Config, path: str) -> dict[str, Any]:
    """One onnx.reference run in a child process, stopped at the limit (it cannot be interrupted
    in-process); its time decides whether and for how many rounds reference runs here."""
    spec = {"runtime": "reference", "model_path": path, "threads": 1, "seed": cfg.seed}
    ans = _child(spec, timeout=cfg.reference_limit_s + 30)  # + imports and model loading
    if ans.get("status") == "ok":
        run_s = ans["runs_s"][0]
        ans["probe_s"] = run_s
        if run_s > cfg.reference_limit_s:
            why = f"one run took {run_s:.0f} s (> {cfg.reference_limit_s:.0f} s)"
            ans = {"status": "skipped", "probe_s": run_s, "reason": why}
    elif ans.get("status") == "timeout":
        ans = {"status": "skipped", "reason": f"one run takes more than "
               f"{cfg.reference_limit_s:.0f} s (probe stopped)"}  # fmt: skip
    return ans


def _creation(cfg: Config, path: str, threads: int) -> dict[str, Any]:
    """numba session creation, cold cache then warm cache, each in a fresh process."""
    cache = tempfile.mkdtemp(prefix="turnout-bench-cache-")
    res: dict[str, Any] = {"threads": threads, "cache_dir": cache}
    for label in ("cold", "warm"):
        spec = {"runtime": "turnout_numba", "model_path": path, "threads": threads,
                "seed": cfg.seed, "runs": 2, "env": {"TURNOUT_CACHE_DIR": cache}}  # fmt: skip
        ans = _child(spec, timeout=900)
        res[label] = {k: ans.get(k) for k in ("status", "reason", "import_s", "create_s", "runs_s")}
    return res


def _memory(
    cfg: Config, path: str, threads: int, cache: str | None, skip: dict[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rt in cfg.runtimes:
        t = 1 if rt == "reference" else threads
        if rt in skip:
            out[rt] = {"status": "skipped", "reason": skip[rt]}
            continue
        spec = {"runtime": rt, "model_path": path, "threads": t, "seed": cfg.seed, "runs": 2}
        if cache:
            spec["env"] = {"TURNOUT_CACHE_DIR": cache}
        ans = _child(spec, timeout=cfg.reference_limit_s * 3 + 120)
        keys = ("status", "reason", "peak_rss_mib", "rss_model_loaded_mib", "rss_before_model_mib")
        out[rt] = {k: ans.get(k) for k in keys}
        out[rt]["threads"] = t
    return out


def profile_ops(model: bytes, feeds: dict[str, Any], threads: int, runs: int = 3) -> dict[str, Any]:
    """Per-op and per-provider time of the numba+CPU session, from turnout's Chrome trace."""
    tmp = tempfile.mkdtemp(prefix="turnout-bench-prof-")
    try:
        sess = make_session("turnout_numba", model, threads, os.path.join(tmp, "p"))
        with _blas_limit(threads):
            sess.run(None, feeds)
            t = time.perf_counter()
            for _ in range(runs):
                sess.run(None, feeds)
            wall = (time.perf_counter() - t) / runs
        with open(sess.end_profiling()) as f:
            events = json.load(f)["traceEvents"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    nodes = [e for e in events if e.get("cat") == "Node"]
    per_run = len(nodes) // (runs + 1) if nodes else 0
    nodes = nodes[-per_run * runs :] if per_run else []  # the timed runs, not the warm-up
    by_op: dict[str, float] = {}
    by_src: dict[str, float] = {}
    for e in nodes:
        a = e.get("args", {})
        key = a.get("op_name", "?")
        by_op[key] = by_op.get(key, 0.0) + e["dur"] / 1e3 / runs
        src = a.get("provider", "?")
        by_src[src] = by_src.get(src, 0.0) + e["dur"] / 1e3 / runs
    node_ms = sum(by_op.values())
    return {
        "threads": threads,
        "wall_ms": wall * 1e3,
        "node_ms": node_ms,
        "steps_per_run": per_run,
        "top_ops_ms": dict(sorted(by_op.items(), key=lambda kv: -kv[1])[:10]),
        "by_provider_ms": by_src,
    }


def _partition(sess: Any) -> dict[str, Any]:
    try:
        return {str(k): int(v) for k, v in sess.partition_report().counts().items()}
    except Exception as e:  # informational only
        return {"error": str(e)}


def bench_model(cfg: Config, name: str, log: Callable[[str], None]) -> dict[str, Any]:
    bm = bench_zoo.get(name)
    t = time.perf_counter()
    proto = bm.build()
    build_s = time.perf_counter() - t
    data = proto.SerializeToString()
    feeds = bench_zoo.feeds(proto, cfg.seed)
    res: dict[str, Any] = {
        "name": name,
        "source": bm.source,
        **bench_zoo.describe(proto),
        "inputs": {k: list(v.shape) for k, v in feeds.items()},
        "build_s": build_s,
    }
    tmp = tempfile.mkdtemp(prefix="turnout-bench-")
    path = os.path.join(tmp, f"{name}.onnx")
    with open(path, "wb") as f:
        f.write(data)
    try:
        return _bench_model(cfg, res, data, path, feeds, log)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench_model(
    cfg: Config,
    res: dict[str, Any],
    data: bytes,
    path: str,
    feeds: dict[str, Any],
    log: Callable[[str], None],
) -> dict[str, Any]:
    name = res["name"]
    cells: list[_Cell] = []
    notes: list[str] = []
    skipped: dict[str, str] = {}
    ref_probe: dict[str, Any] = {}
    if "reference" in cfg.runtimes:
        log(f"{name}: onnx.reference probe (limit {cfg.reference_limit_s:.0f} s)")
        ref_probe = _reference_probe(cfg, path)
        if ref_probe.get("status") != "ok":
            skipped["reference"] = ref_probe.get("reason", "failed")
            notes.append(f"onnx.reference skipped: {skipped['reference']}")
    creation: dict[str, Any] = {}
    cache = None
    if cfg.creation and "turnout_numba" in cfg.runtimes:
        log(f"{name}: numba session creation, cold and warm cache (child processes)")
        creation = _creation(cfg, path, max(cfg.threads))
        cache = creation["cache_dir"]
    old_cache = os.environ.get("TURNOUT_CACHE_DIR")
    try:
        if cache:  # this process's numba sessions use the cache the children filled
            os.environ["TURNOUT_CACHE_DIR"] = cache
        for rt in cfg.runtimes:
            if rt in skipped:
                continue
            for th in [1] if rt == "reference" else cfg.threads:
                t = time.perf_counter()
                try:
                    sess = make_session(rt, data, th)
                except Exception as e:
                    skipped[rt] = f"session creation failed: {type(e).__name__}: {e}"
                    notes.append(f"{rt} failed: {skipped[rt]}")
                    break
                cells.append(_Cell(rt, th, sess, time.perf_counter() - t))
        log(f"{name}: warm-up")
        for c in list(cells):
            try:
                with _run_context(c.runtime, c.threads):
                    t = time.perf_counter()
                    c.session.run(None, feeds)
                    c.first_run_ms = (time.perf_counter() - t) * 1e3
                    t = time.perf_counter()
                    c.outputs = c.session.run(None, feeds)
                    est = time.perf_counter() - t
            except Exception as e:
                skipped[c.runtime] = f"run failed: {type(e).__name__}: {e}"
                notes.append(f"{c.runtime} ({c.threads} threads) failed: {skipped[c.runtime]}")
                cells.remove(c)
                continue
            c.block = max(1, min(cfg.max_block, int(cfg.block_s / max(est, 1e-9))))
            c.rounds = cfg.repeat
            if c.runtime == "reference":
                c.rounds = max(1, min(cfg.reference_repeat,
                                      int(cfg.reference_budget_s / max(est, 1e-9))))  # fmt: skip
        log(f"{name}: {cfg.repeat} interleaved rounds over {len(cells)} cells")
        for r in range(cfg.repeat):
            k = r % max(len(cells), 1)
            for c in cells[k:] + cells[:k]:
                if r < c.rounds:
                    time.sleep(cfg.settle_s)
                    _time_block(c, feeds)
        profile = None
        if cfg.profile and "turnout_numba" in cfg.runtimes and "turnout_numba" not in skipped:
            log(f"{name}: profiling the numba session")
            profile = profile_ops(data, feeds, cfg.threads[0])
    finally:
        if cache:
            if old_cache is None:
                os.environ.pop("TURNOUT_CACHE_DIR", None)
            else:
                os.environ["TURNOUT_CACHE_DIR"] = old_cache
    memory = None
    if cfg.memory:
        log(f"{name}: peak memory (a child process per runtime)")
        memory = _memory(cfg, path, max(cfg.threads), cache, skipped)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)
    res.update(_summarize_cells(cfg, cells, skipped, ref_probe))
    res["notes"] = notes
    res["session_creation"] = _creation_summary(cells, creation)
    if memory is not None:
        res["memory"] = memory
    if profile is not None:
        res["profile"] = profile
    return res


def _summarize_cells(
    cfg: Config, cells: list[_Cell], skipped: dict[str, str], ref_probe: dict[str, Any]
) -> dict[str, Any]:
    base = {c.threads: c for c in cells if c.runtime == BASELINE}
    out_cells = []
    for c in cells:
        med = statistics.median(c.samples_ms) if c.samples_ms else math.nan
        cell: dict[str, Any] = {
            "runtime": c.runtime,
            "threads": c.threads,
            "median_ms": med,
            "n": len(c.samples_ms),
            "block": c.block,
            "rounds": min(c.rounds, cfg.repeat),
            "first_run_ms": c.first_run_ms,
            "session_create_s": c.create_s,
            "samples_ms": [round(s, 6) for s in c.samples_ms],
        }
        if c.runtime in ("turnout_cpu", "turnout_numba"):
            cell["placement"] = _partition(c.session)
        ref = base.get(c.threads)
        if ref is not None and c.runtime != BASELINE:
            cell["parity_vs_onnxruntime"] = parity(c.outputs, ref.outputs)
        out_cells.append(cell)
    ratios: dict[str, dict[str, float]] = {}
    for th in cfg.threads:
        b = next((x for x in out_cells if x["runtime"] == BASELINE and x["threads"] == th), None)
        if b is None or not b["median_ms"] > 0:
            continue
        ratios[str(th)] = {
            x["runtime"]: x["median_ms"] / b["median_ms"]
            for x in out_cells
            if x["threads"] == th and x["runtime"] != BASELINE
        }
    probe = {k: v for k, v in ref_probe.items() if k in ("status", "reason", "probe_s")}
    return {"cells": out_cells, "ratios_to_onnxruntime": ratios, "skipped": skipped,
            "reference_probe": probe}  # fmt: skip


def _creation_summary(cells: list[_Cell], creation: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        f"{c.runtime}_{c.threads}t_in_process_s": c.create_s
        for c in cells
        if c.runtime != "reference"
    }
    if creation:
        for label in ("cold", "warm"):
            d = creation.get(label, {})
            out[f"turnout_numba_{label}"] = {
                "threads": creation["threads"],
                "status": d.get("status"),
                "reason": d.get("reason"),
                "import_s": d.get("import_s"),
                "create_s": d.get("create_s"),
                "first_run_s": (d.get("runs_s") or [None])[0],
                "second_run_s": (d.get("runs_s") or [None, None])[-1],
            }
    return out


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def summarize(report: dict[str, Any], threads: list[int]) -> dict[str, Any]:
    """Geometric means of ratios and the issue-5 targets, from the models' measured medians."""
    geo: dict[str, dict[str, Any]] = {}
    for th in threads:
        key = str(th)
        per_rt: dict[str, list[float]] = {}
        for m in report["models"]:
            for rt, r in m["ratios_to_onnxruntime"].get(key, {}).items():
                per_rt.setdefault(rt, []).append(r)
        geo[key] = {rt: {"geomean": _geomean(v), "models": len(v)} for rt, v in per_rt.items()}
    # onnx.reference speed-up: reference median / numba median at 1 thread
    speedups = []
    for m in report["models"]:
        med = {(c["runtime"], c["threads"]): c["median_ms"] for c in m["cells"]}
        if ("reference", 1) in med and ("turnout_numba", 1) in med:
            speedups.append(med[("reference", 1)] / med[("turnout_numba", 1)])
    targets: dict[str, Any] = {}
    for th in threads:
        ratios = {m["name"]: m["ratios_to_onnxruntime"].get(str(th), {}).get("turnout_numba")
                  for m in report["models"]}  # fmt: skip
        ratios = {k: v for k, v in ratios.items() if v is not None}
        if not ratios:
            continue
        g = _geomean(list(ratios.values()))
        worst = max(ratios, key=lambda k: ratios[k])
        key = f"{th}t"
        targets[f"numba/ort geomean <= 1.5 ({key})"] = {"value": g, "met": g <= 1.5}
        targets[f"no model numba/ort above 3.0 ({key})"] = {
            "value": ratios[worst], "worst": worst, "met": ratios[worst] <= 3.0,
            "above": sorted(k for k, v in ratios.items() if v > 3.0),
        }  # fmt: skip
        for m in ("bert_like", "mlp"):
            if m in ratios:
                targets[f"{m} numba/ort <= 1.2 ({key})"] = {
                    "value": ratios[m],
                    "met": ratios[m] <= 1.2,
                }
    if speedups:
        g = _geomean(speedups)
        targets["numba >= 20x faster than onnx.reference (geomean, 1t)"] = {
            "value": g, "met": g >= 20.0, "models": len(speedups),
        }  # fmt: skip
    return {"geomean_ratios_to_onnxruntime": geo, "reference_speedup_1t": speedups,
            "targets": targets}  # fmt: skip


def run_benchmark(cfg: Config) -> dict[str, Any]:
    """Benchmark every model of `cfg` and return the report (see docs/benchmarks.md)."""
    log = cfg.log or (lambda s: None)
    for rt in cfg.runtimes:
        if rt not in RUNTIMES:
            raise ValueError(f"unknown runtime {rt!r}; known: {', '.join(RUNTIMES)}")
    if BASELINE not in cfg.runtimes:
        raise ValueError("onnxruntime is the baseline of every ratio: keep it in runtimes")
    if "turnout_numba" in cfg.runtimes:
        import turnout_numba  # noqa: F401 - fail early when the provider is not installed
    report: dict[str, Any] = {
        "schema": 1,
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "load_average_start": _loadavg(),
        "environment": environment(),
        "config": {k: v for k, v in asdict(cfg).items() if k != "log"},
        "tolerances": {"rtol": RTOL, "atol": ATOL},
        "models": [],
    }
    for name in cfg.models:
        t = time.perf_counter()
        log(f"== {name}")
        report["models"].append(bench_model(cfg, name, log))
        report["models"][-1]["bench_s"] = time.perf_counter() - t
    report["environment"]["blas_after"] = blas_info()
    report["load_average_end"] = _loadavg()
    report["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    report["summary"] = summarize(report, cfg.threads)
    return report


# ---------------------------------------------------------------------------- command line
def add_arguments(p: argparse.ArgumentParser) -> None:
    known = ", ".join(bench_zoo.names())
    p.add_argument("--models", help=f"comma-separated (default: all): {known}, tiny_ops_chain(N)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--repeat", type=int, default=10, help="interleaved rounds per model")
    p.add_argument("--reference-repeat", type=int, default=3, help="rounds for onnx.reference")
    p.add_argument("--reference-limit", type=float, default=60.0,
                   help="skip onnx.reference where one run takes longer (seconds)")  # fmt: skip
    p.add_argument("--runtimes", default=",".join(RUNTIMES), help="comma-separated subset")
    p.add_argument("--settle", type=float, default=0.3,
                   help="pause before each block of runs (s): spinning threads sleep")  # fmt: skip
    p.add_argument("--memory", action="store_true", help="peak RSS (a process per runtime+model)")
    p.add_argument("--no-creation", action="store_true", help="skip cold/warm creation children")
    p.add_argument("--profile", action="store_true", help="per-op times of the numba session")
    p.add_argument("--json", help="write the full report (every sample) as JSON here")
    p.add_argument("--markdown", help="write the Markdown table here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def config_from_args(args: argparse.Namespace) -> Config:
    names = args.models.split(",") if args.models else bench_zoo.names()
    for n in names:
        bench_zoo.get(n)  # unknown names fail before anything runs
    return Config(
        models=names,
        threads=[int(t) for t in args.threads.split(",")],
        repeat=max(1, args.repeat),
        reference_repeat=max(1, args.reference_repeat),
        reference_limit_s=args.reference_limit,
        runtimes=args.runtimes.split(","),
        settle_s=max(0.0, args.settle),
        creation=not args.no_creation,
        memory=args.memory,
        profile=args.profile,
        log=None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True)),
    )


def run_from_args(args: argparse.Namespace) -> int:
    from .report import to_markdown

    try:
        cfg = config_from_args(args)
    except (KeyError, ValueError) as e:
        print(f"benchmarks: error: {e}", file=sys.stderr)
        return 2
    report = run_benchmark(cfg)
    md = to_markdown(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=float)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    print(md)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        _child_main(json.loads(argv[1]))
        return 0
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
