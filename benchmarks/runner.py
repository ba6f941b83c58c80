"""Benchmark runner: turnout (three ways), onnxruntime and onnx.reference on the zoo, same run.

Runtimes (`RUNTIMES`): `turnout_cpu` is `providers=["CPUExecutionProvider"]` as applications
write it, which in turnout means the host (turnout-numba serves it when installed);
`turnout_cpu_numpy` is the same request with the numpy kernels only (session config entry
`session.turnout.cpu_numpy_only` = "1"); `turnout_numba` names the numba provider explicitly;
then `onnxruntime` (the baseline of every ratio) and `onnx.reference`.

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
- Session creation is measured in-process (the sessions that are timed) and in child
  processes: `turnout_cpu` with a cold cache (a fresh TURNOUT_CACHE_DIR) that it fills, then
  every runtime with that warm cache, each in a new process so numba's in-memory caches cannot
  help; the children also time their first and second run. Peak RSS (`--memory`) likewise, one
  child per runtime and model.
- `--import-torch` (python -m benchmarks only) imports torch and sets it to one thread before
  anything else, in this process and in the children: numba next to torch's OpenMP runtime.

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

from . import BLAS_OVERRIDES, blas_overrides_unset, import_torch
from . import zoo as bench_zoo

__all__ = ["RUNTIMES", "Config", "main", "parity", "run_benchmark"]

RUNTIMES = ("turnout_cpu", "turnout_cpu_numpy", "turnout_numba", "onnxruntime", "reference")
TURNOUT = ("turnout_cpu", "turnout_cpu_numpy", "turnout_numba")
CHILD_RUNTIMES = (*TURNOUT, "onnxruntime")  # session creation in child processes
CPU_NUMPY_ONLY_KEY = "session.turnout.cpu_numpy_only"  # turnout.engine.provider_selection's switch
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
    creation: bool = True  # cold/warm session creation in child processes
    memory: bool = False  # peak RSS, one child process per runtime and model
    profile: bool = False  # per-op time of the turnout sessions (turnout's profiler)
    import_torch: bool = False  # children import torch first (the parent did, in __main__)
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
    opts.intra_op_num_threads = threads  # the host provider takes it, as onnxruntime's CPU does
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    if runtime in ("turnout_cpu", "turnout_cpu_numpy"):
        # explicit either way: TURNOUT_CPU_NUMPY_ONLY in the environment must not turn the
        # host off for the turnout_cpu column (the config entry wins over the variable)
        numpy_only = "1" if runtime == "turnout_cpu_numpy" else "0"
        opts.add_session_config_entry(CPU_NUMPY_ONLY_KEY, numpy_only)
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
    """Run `python -m benchmarks --child SPEC` and return its JSON answer (through the package's
    __main__, which imports torch first when the spec asks for it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(spec.pop("env", {}))
    cmd = [sys.executable, "-m", "benchmarks", "--child", json.dumps(spec)]
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

        if spec["runtime"] != "turnout_cpu_numpy":
            with contextlib.suppress(ImportError):  # turnout_cpu without it: numpy kernels
                import turnout_numba  # noqa: F401
    elif spec["runtime"] == "onnxruntime":
        import onnxruntime  # noqa: F401
    else:
        import onnx.reference
    import_s = time.perf_counter() - t
    import onnx

    model = onnx.load(spec["model_path"])
    feeds = bench_zoo.model_feeds(spec["model"], model, spec.get("seed", 0))
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
        "torch_imported": "torch" in sys.modules,
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
    torch = sys.modules.get("torch")  # imported only with --import-torch
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
        "torch": None if torch is None else {
            "version": str(getattr(torch, "__version__", "?")),
            "num_threads": int(torch.get_num_threads()),
        },
    }  # fmt: skip


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


def _spec(
    cfg: Config, name: str, runtime: str, path: str, threads: int, **kw: Any
) -> dict[str, Any]:
    """What a child process is asked to do (see `_child_main`)."""
    spec = {"runtime": runtime, "model": name, "model_path": path, "threads": threads,
            "seed": cfg.seed, "import_torch": cfg.import_torch}  # fmt: skip
    spec.update(kw)
    return spec


def _reference_probe(cfg: Config, name: str, path: str) -> dict[str, Any]:
    """One onnx.reference run in a child process, stopped at the limit (it cannot be interrupted
    in-process); its time decides whether and for how many rounds reference runs here."""
    spec = _spec(cfg, name, "reference", path, 1)
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


_CHILD_KEYS = ("status", "reason", "import_s", "create_s", "runs_s", "torch_imported")


def _creation(cfg: Config, name: str, path: str, threads: int) -> dict[str, Any]:
    """Session creation in fresh processes: turnout_cpu with a cold cache that it fills, then
    every runtime (of CHILD_RUNTIMES that runs here) with that warm cache."""
    cache = tempfile.mkdtemp(prefix="turnout-bench-cache-")
    res: dict[str, Any] = {"threads": threads, "cache_dir": cache, "warm": {}}
    env = {"TURNOUT_CACHE_DIR": cache}
    runtimes = [rt for rt in CHILD_RUNTIMES if rt in cfg.runtimes]
    if "turnout_cpu" in runtimes:
        ans = _child(_spec(cfg, name, "turnout_cpu", path, threads, runs=2, env=env), 900)
        res["cold"] = {"runtime": "turnout_cpu", **{k: ans.get(k) for k in _CHILD_KEYS}}
    for rt in runtimes:
        ans = _child(_spec(cfg, name, rt, path, threads, runs=2, env=dict(env)), 900)
        res["warm"][rt] = {k: ans.get(k) for k in _CHILD_KEYS}
    return res


def _memory(
    cfg: Config, name: str, path: str, threads: int, cache: str | None, skip: dict[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rt in cfg.runtimes:
        t = 1 if rt == "reference" else threads
        if rt in skip:
            out[rt] = {"status": "skipped", "reason": skip[rt]}
            continue
        spec = _spec(cfg, name, rt, path, t, runs=2)
        if cache:
            spec["env"] = {"TURNOUT_CACHE_DIR": cache}
        ans = _child(spec, timeout=cfg.reference_limit_s * 3 + 120)
        keys = ("status", "reason", "peak_rss_mib", "rss_model_loaded_mib", "rss_before_model_mib")
        out[rt] = {k: ans.get(k) for k in keys}
        out[rt]["threads"] = t
    return out


def profile_ops(
    model: bytes,
    feeds: dict[str, Any],
    threads: int,
    runs: int = 10,
    runtime: str = "turnout_numba",
) -> dict[str, Any]:
    """Per-op and per-provider time of a turnout session, from turnout's Chrome trace.

    Each node's time is its median over the timed runs (times its calls per run), and the wall
    time the median run: on a shared machine a preempted run otherwise puts one op on top.
    """
    tmp = tempfile.mkdtemp(prefix="turnout-bench-prof-")
    walls = []
    try:
        sess = make_session(runtime, model, threads, os.path.join(tmp, "p"))
        with _blas_limit(threads):
            sess.run(None, feeds)
            for _ in range(runs):
                t = time.perf_counter()
                sess.run(None, feeds)
                walls.append(time.perf_counter() - t)
        with open(sess.end_profiling()) as f:
            events = json.load(f)["traceEvents"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    nodes = [e for e in events if e.get("cat") == "Node"]
    per_run = len(nodes) // (runs + 1) if nodes else 0
    nodes = nodes[-per_run * runs :] if per_run else []  # the timed runs, not the warm-up
    per_node: dict[tuple[str, str, str], list[float]] = {}
    for e in nodes:
        a = e.get("args", {})
        key = (e.get("name", "?"), a.get("op_name", "?"), a.get("provider", "?"))
        per_node.setdefault(key, []).append(e["dur"] / 1e3)
    by_op: dict[str, float] = {}
    by_src: dict[str, float] = {}
    for (_, op, src), durs in per_node.items():
        ms = statistics.median(durs) * len(durs) / runs
        by_op[op] = by_op.get(op, 0.0) + ms
        by_src[src] = by_src.get(src, 0.0) + ms
    return {
        "runtime": runtime,
        "threads": threads,
        "wall_ms": statistics.median(walls) * 1e3,
        "node_ms": sum(by_op.values()),
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
    feeds = bench_zoo.model_feeds(name, proto, cfg.seed)
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
        ref_probe = _reference_probe(cfg, name, path)
        if ref_probe.get("status") != "ok":
            skipped["reference"] = ref_probe.get("reason", "failed")
            notes.append(f"onnx.reference skipped: {skipped['reference']}")
    creation: dict[str, Any] = {}
    cache = None
    if cfg.creation and any(rt in cfg.runtimes for rt in CHILD_RUNTIMES):
        log(f"{name}: session creation, cold and warm cache (child processes)")
        creation = _creation(cfg, name, path, max(cfg.threads))
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
        profile: dict[str, Any] = {}
        for rt in TURNOUT if cfg.profile else ():
            if rt in cfg.runtimes and rt not in skipped:
                log(f"{name}: profiling the {rt} session")
                profile[rt] = profile_ops(data, feeds, cfg.threads[0], runtime=rt)
    finally:
        if cache:
            if old_cache is None:
                os.environ.pop("TURNOUT_CACHE_DIR", None)
            else:
                os.environ["TURNOUT_CACHE_DIR"] = old_cache
    memory = None
    if cfg.memory:
        log(f"{name}: peak memory (a child process per runtime)")
        memory = _memory(cfg, name, path, max(cfg.threads), cache, skipped)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)
    res.update(_summarize_cells(cfg, cells, skipped, ref_probe))
    res["notes"] = notes
    res["session_creation"] = _creation_summary(cells, creation)
    if memory is not None:
        res["memory"] = memory
    if profile:
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
        if c.runtime in TURNOUT:
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
    """Creation times: `in_process_s[runtime][threads]`, and the child processes' `cold`
    (turnout_cpu filling the cache) and `warm[runtime]`, each with its first and second run."""
    in_process: dict[str, dict[str, float]] = {}
    for c in cells:
        if c.runtime != "reference":
            in_process.setdefault(c.runtime, {})[str(c.threads)] = c.create_s
    out: dict[str, Any] = {"in_process_s": in_process}
    if not creation:
        return out

    def child(d: dict[str, Any]) -> dict[str, Any]:
        runs = d.get("runs_s") or [None, None]
        keep = ("status", "reason", "import_s", "create_s", "torch_imported")
        return {**{k: d.get(k) for k in keep}, "first_run_s": runs[0], "second_run_s": runs[-1]}

    out["child_threads"] = creation["threads"]
    if "cold" in creation:
        out["cold"] = {"runtime": creation["cold"]["runtime"], **child(creation["cold"])}
    out["warm"] = {rt: child(d) for rt, d in creation["warm"].items()}
    return out


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def _ratios(report: dict[str, Any], runtime: str, threads: int) -> dict[str, float]:
    """model -> `runtime`'s ratio to onnxruntime at `threads`, for the models that have one."""
    out = {m["name"]: m["ratios_to_onnxruntime"].get(str(threads), {}).get(runtime)
           for m in report["models"]}  # fmt: skip
    return {k: v for k, v in out.items() if v is not None and math.isfinite(v)}


def _geomean_target(ratios: dict[str, float], limit: float, issue: int) -> dict[str, Any]:
    g = _geomean(list(ratios.values()))
    return {"value": g, "met": g <= limit, "models": len(ratios), "issue": issue}


def _worst_target(ratios: dict[str, float], limit: float, issue: int) -> dict[str, Any]:
    worst = max(ratios, key=lambda k: ratios[k])
    return {"value": ratios[worst], "worst": worst, "met": ratios[worst] <= limit,
            "above": sorted(k for k, v in ratios.items() if v > limit), "issue": issue}  # fmt: skip


def _creation_ratios(report: dict[str, Any]) -> dict[str, float]:
    """model -> turnout_cpu's warm-cache creation time / onnxruntime's (both in children)."""
    out = {}
    for m in report["models"]:
        warm = m["session_creation"].get("warm", {})
        cpu = warm.get("turnout_cpu", {}).get("create_s")
        ort = warm.get("onnxruntime", {}).get("create_s")
        if cpu and ort:
            out[m["name"]] = cpu / ort
    return out


def first_run_ratios(m: dict[str, Any], runtime: str) -> dict[str, float | None]:
    """First run / steady median for `runtime`: `in_process` (the timed session's first run,
    first thread count) and `warm_child` (a fresh process on a warm cache, at the child's thread
    count); None where not measured."""
    steady = {c["threads"]: c["median_ms"] for c in m["cells"] if c["runtime"] == runtime}
    out: dict[str, float | None] = {"in_process": None, "warm_child": None}
    cells = [c for c in m["cells"] if c["runtime"] == runtime and c["median_ms"] > 0]
    if cells:
        out["in_process"] = cells[0]["first_run_ms"] / cells[0]["median_ms"]
    sc = m["session_creation"]
    first = sc.get("warm", {}).get(runtime, {}).get("first_run_s")
    base = steady.get(sc.get("child_threads", -1))
    if first and base:
        out["warm_child"] = first * 1e3 / base
    return out


def summarize(report: dict[str, Any], threads: list[int]) -> dict[str, Any]:
    """Geometric means of ratios and the targets of issues 13 and 5, from the models' medians.

    Issue 13 (the host behind CPUExecutionProvider, on the models users run): turnout_cpu/ort
    geomean <= 1.3 at 1 thread with no model above 2, <= 1.5 at 2 threads; the numpy-only
    switch <= 2 (geomean, each thread count); warm-cache session creation <= 2x onnxruntime's
    (geomean, child processes); the first run of a warm-cache process <= 2x the steady median
    (every model). Issue 5 (the numba provider named explicitly) as before.
    """
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
    # issue 13
    cpu = {th: _ratios(report, "turnout_cpu", th) for th in threads}
    if cpu.get(1):
        targets["cpu(host)/ort geomean <= 1.3 (1t)"] = _geomean_target(cpu[1], 1.3, 13)
        targets["no model cpu(host)/ort above 2.0 (1t)"] = _worst_target(cpu[1], 2.0, 13)
    if cpu.get(2):
        targets["cpu(host)/ort geomean <= 1.5 (2t)"] = _geomean_target(cpu[2], 1.5, 13)
    for th in threads:
        numpy_only = _ratios(report, "turnout_cpu_numpy", th)
        if numpy_only:
            name = f"cpu numpy-only/ort geomean <= 2.0 ({th}t)"
            targets[name] = _geomean_target(numpy_only, 2.0, 13)
    creation = _creation_ratios(report)
    if creation:
        name = "session creation cpu(host)/ort, warm cache (child), geomean <= 2.0"
        targets[name] = _geomean_target(creation, 2.0, 13)
    first = {m["name"]: first_run_ratios(m, "turnout_cpu")["warm_child"] for m in report["models"]}
    first_known = {k: v for k, v in first.items() if v is not None}
    if first_known:
        name = "first run <= 2x steady (cpu host, warm-cache child), every model"
        targets[name] = _worst_target(first_known, 2.0, 13)
    # issue 5
    for th in threads:
        ratios = _ratios(report, "turnout_numba", th)
        if not ratios:
            continue
        key = f"{th}t"
        targets[f"numba/ort geomean <= 1.5 ({key})"] = _geomean_target(ratios, 1.5, 5)
        targets[f"no model numba/ort above 3.0 ({key})"] = _worst_target(ratios, 3.0, 5)
        for m in ("bert_like", "mlp"):
            if m in ratios:
                targets[f"{m} numba/ort <= 1.2 ({key})"] = {
                    "value": ratios[m], "met": ratios[m] <= 1.2, "issue": 5,
                }  # fmt: skip
    if speedups:
        g = _geomean(speedups)
        targets["numba >= 20x faster than onnx.reference (geomean, 1t)"] = {
            "value": g, "met": g >= 20.0, "models": len(speedups), "issue": 5,
        }  # fmt: skip
    return {"geomean_ratios_to_onnxruntime": geo, "reference_speedup_1t": speedups,
            "session_creation_ratio_warm": creation, "targets": targets}  # fmt: skip


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
        "schema": 2,
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
    p.add_argument("--profile", action="store_true", help="per-op times of the turnout sessions")
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
        import_torch=bool(getattr(args, "import_torch", False)),
        log=None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True)),
    )


def run_from_args(args: argparse.Namespace) -> int:
    from .report import to_markdown

    try:
        cfg = config_from_args(args)
        if cfg.import_torch:
            import_torch()  # already done by `python -m benchmarks`, first; a no-op then
    except (KeyError, ValueError, ImportError) as e:
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
    # only here: `turnout bench` has loaded numpy and turnout before the runner, too late
    p.add_argument(
        "--import-torch",
        action="store_true",
        help="import torch (1 thread) before anything else, here and in children",
    )
    return run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
