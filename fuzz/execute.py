"""Run one fuzz case in this process and classify it against an oracle.

Called inside a pool worker. `stage` tells the parent which runtime is about to run, so a crash
is blamed on the right one. Outcome classes (against onnxruntime, else onnx.reference):

- `ok`: both ran, outputs agree within tolerance;
- `mismatch`: both ran, outputs differ (shape, dtype, or values: max abs/rel difference kept);
- `both-error`: both rejected the case (fine: an invalid mutation);
- `turnout-error-only` / `<oracle>-error-only`: one side rejected it;
- `bare-exception`: turnout raised something that is not a `TurnoutError`, or a kernel broke
  its contract (returned the wrong number of outputs: typed by the executor, but a bug) - a
  finding whatever the oracle did; MemoryError counts as typed, resource exhaustion is not a bug;
- `crash` and `hang` are decided by the pool, never here.

A non-CPU provider is also classified against turnout's CPU provider (`vs_cpu`). A mismatch
with onnxruntime is also classified against onnx.reference (`vs_reference`): `ok` there means
onnxruntime is the odd one out, which is where most reviewed differences come from.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .generate import FuzzCase

__all__ = [
    "CONTRACT_BROKEN",
    "CPU",
    "FINDINGS",
    "OUTCOMES",
    "PROVIDERS",
    "Ran",
    "compare_outputs",
    "execute",
    "tolerance",
]

CPU = "CPUExecutionProvider"
PROVIDERS = {"cpu": CPU, "numba": "NumbaExecutionProvider", "opencl": "OpenCLExecutionProvider"}
"""Short names the command line and the tests use."""
OUTCOMES = (
    "crash",
    "hang",
    "bare-exception",
    "mismatch",
    "turnout-error-only",
    "ort-error-only",
    "reference-error-only",
    "cpu-error-only",
    "both-error",
    "ok",
)
FINDINGS = frozenset({"crash", "hang", "bare-exception", "mismatch"})
"""Outcomes that fail the CI run unless a reviewed known difference covers them."""
CONTRACT_BROKEN = "kernel returned the wrong number of outputs"
"""What the executor says when a kernel's output count is not its node's: never the model's
fault (an optional output left out, `m_outputs`, is how the fuzzer finds it)."""

_TOLERANCE = {"float16": (1e-2, 1e-3), "float32": (1e-3, 1e-5), "float64": (1e-3, 1e-5)}
_SCALE = {"float16": 4e-3, "float32": 1e-5, "float64": 1e-5}
"""atol grows with the output's largest finite magnitude: sums in another order (DFT, MatMul)
leave cancellation errors in small elements relative to the large ones."""


@dataclass
class Ran:
    """What one runtime did with a case: outputs, or the error it raised."""

    outputs: list[Any] | None
    error: str = ""
    typed: bool = True
    cause: str = ""  # a bare exception that turnout wrapped in a typed one (informational)
    placed: int = 0  # nodes the requested provider ran (turnout only)
    nodes: int = 0


def run_turnout(case: FuzzCase, provider: str) -> Ran:
    """Run on `provider` with fallback to CPU allowed, so the partition boundary is exercised."""
    from turnout.api.options import SessionOptions
    from turnout.api.session import InferenceSession
    from turnout.engine.provider_selection import CPU_NUMPY_ONLY_KEY
    from turnout.graph.errors import TurnoutError

    so = SessionOptions()
    so.fallback = "allow"
    so.intra_op_num_threads = 1
    # CPU is the numpy kernels here: the reference, and the fallback behind the provider fuzzed
    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")
    providers = [provider] if provider == CPU else [provider, CPU]
    placed = nodes = 0
    try:
        sess = InferenceSession(case.model, so, providers=providers)
        assignments = sess.partition_report().assignments
        placed = sum(a.provider == provider for a in assignments)
        nodes = len(assignments)
        outs = sess.run(None, dict(case.feeds))
    except TurnoutError as e:
        cause = e.__cause__
        bare = cause is not None and not isinstance(cause, TurnoutError)
        typed = CONTRACT_BROKEN not in str(e)
        return Ran(None, _message(e), typed, type(cause).__name__ if bare else "", placed, nodes)
    except MemoryError as e:
        return Ran(None, _message(e), True, "MemoryError", placed, nodes)
    except Exception as e:
        return Ran(None, _message(e), False, "", placed, nodes)
    return Ran(list(outs), placed=placed, nodes=nodes)


def run_onnxruntime(case: FuzzCase) -> Ran:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(case.model, so, providers=["CPUExecutionProvider"])
        return Ran(list(sess.run(None, dict(case.feeds))))
    except Exception as e:
        return Ran(None, _message(e))


def run_reference(case: FuzzCase) -> Ran:
    from onnx.reference import ReferenceEvaluator

    try:
        return Ran(list(ReferenceEvaluator(case.model).run(None, dict(case.feeds))))
    except Exception as e:
        return Ran(None, _message(e))


def _message(e: BaseException, limit: int = 600) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def tolerance(dtype: np.dtype[Any], rtol: float, atol: float) -> tuple[float, float]:
    """The case's tolerance widened to what the output dtype can hold (as conformance does for
    node tests: rtol 1e-3; atol a little looser since fuzz values span many magnitudes)."""
    r, a = _TOLERANCE.get(dtype.name, (0.0, 0.0))
    return max(r, rtol if dtype.kind == "f" else 0.0), max(a, atol if dtype.kind == "f" else 0.0)


@dataclass
class Difference:
    detail: str
    max_abs: float | None = None
    max_rel: float | None = None


def compare_outputs(got: list[Any], want: list[Any], rtol: float, atol: float) -> Difference | None:
    """None when `got` matches `want`: same count, dtypes, shapes, values within tolerance
    (NaN equals NaN, infinities must match in sign)."""
    if len(got) != len(want):
        return Difference(f"{len(got)} outputs vs {len(want)}")
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, list) or isinstance(g, list):
            if not isinstance(g, list) or not isinstance(w, list):
                return Difference(f"output {k}: {type(g).__name__} vs {type(w).__name__}")
            d = compare_outputs(g, w, rtol, atol)
        elif g is None or w is None:
            d = None if g is None and w is None else Difference(f"output {k}: one side is None")
        else:
            d = _compare_array(np.asarray(g), np.asarray(w), rtol, atol)
        if d is not None:
            d.detail = f"output {k}: {d.detail}"
            return d
    return None


_RAW_BITS = ("float8", "float4", "bfloat16", "int4", "uint4", "int2", "uint2")


def _compare_array(g: np.ndarray, w: np.ndarray, rtol: float, atol: float) -> Difference | None:
    raw = g.dtype.name.startswith(_RAW_BITS) and w.dtype.kind == "u"
    if raw and g.dtype != w.dtype and g.dtype.itemsize == w.dtype.itemsize:
        w = w.view(g.dtype)  # onnxruntime hands these types out as raw bits
    if g.dtype != w.dtype:
        return Difference(f"dtype {g.dtype} vs {w.dtype}")
    if g.shape != w.shape:
        return Difference(f"shape {list(g.shape)} vs {list(w.shape)}")
    if g.dtype.kind not in "biufc" and not g.dtype.name.startswith(_RAW_BITS):
        return None if np.array_equal(g, w) else Difference("values differ")
    r, a = tolerance(g.dtype, rtol, atol)
    x, y = g.astype(np.float64), w.astype(np.float64)
    finite = np.abs(y[np.isfinite(y)])
    if finite.size:
        a = max(a, _SCALE.get(g.dtype.name, 0.0) * float(finite.max()))
    with np.errstate(all="ignore"):
        bad = ~np.isclose(x, y, rtol=r, atol=a, equal_nan=True)
        if not bad.any():
            return None
        err = np.abs(x - y)[bad]
        rel = err / np.maximum(np.abs(y[bad]), np.finfo(np.float64).tiny)
    fin = np.isfinite(err)
    max_abs = float(err[fin].max()) if fin.any() else float("inf")
    max_rel = float(rel[fin].max()) if fin.any() else float("inf")
    nan = int((np.isnan(x) != np.isnan(y)).sum())
    detail = f"max abs {max_abs:.3g}, max rel {max_rel:.3g}, {int(bad.sum())}/{g.size} differ"
    return Difference(detail + (f" ({nan} NaN on one side only)" if nan else ""), max_abs, max_rel)


def classify(got: Ran, oracle: Ran, oracle_name: str, case: FuzzCase) -> tuple[str, Difference]:
    """(outcome class, what differs) of turnout's `got` against `oracle`."""
    if not got.typed:
        return "bare-exception", Difference(got.error)
    if got.outputs is None and oracle.outputs is None:
        return "both-error", Difference(got.error)
    if got.outputs is None:
        return "turnout-error-only", Difference(got.error)
    if oracle.outputs is None:
        return f"{oracle_name}-error-only", Difference(oracle.error)
    d = compare_outputs(got.outputs, oracle.outputs, case.rtol, case.atol)
    return ("ok", Difference("")) if d is None else ("mismatch", d)


def oracle_name() -> str:
    """onnxruntime where it is installed, onnx.reference otherwise."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "reference"
    return "ort"


def execute(case: FuzzCase, provider: str, stage: Callable[[str], None] = print) -> dict[str, Any]:
    """Run `case` on `provider`, the oracle and (for other providers) turnout's CPU provider;
    the result record (a plain dict, it crosses the pipe and lands in the JSON report)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        stage(provider)
        got = run_turnout(case, provider)
        cpu = None
        if provider != CPU:
            stage(CPU)
            cpu = run_turnout(case, CPU)
        name = oracle_name()
        stage(name)
        oracle = run_onnxruntime(case) if name == "ort" else run_reference(case)
    outcome, diff = classify(got, oracle, name, case)
    rec: dict[str, Any] = {
        "outcome": outcome,
        "detail": diff.detail,
        "max_abs": diff.max_abs,
        "max_rel": diff.max_rel,
        "turnout_error": got.error,
        "oracle_error": oracle.error,
        "wrapped": got.cause,
        "placed": got.placed,
        "nodes": got.nodes,
        "dtypes": sorted({v.dtype.name for v in case.feeds.values()}),
    }
    if cpu is not None:
        vs, d = classify(got, cpu, "cpu", case)
        rec.update(vs_cpu=vs, vs_cpu_detail=d.detail)
    if outcome == "mismatch" and name == "ort":  # the tie-breaker, only where it is needed
        stage("reference")
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ref = run_reference(case)
        rec["vs_reference"] = classify(got, ref, "reference", case)[0]
    return rec
