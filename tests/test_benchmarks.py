"""The benchmark suite's runner and report: structure and arithmetic, never wall times."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import report, runner, zoo  # noqa: E402

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    mp = pytest.MonkeyPatch()
    mp.setenv("TURNOUT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        cfg = runner.Config(
            models=["tiny_ops_chain(20)"],
            threads=[1, 2],
            repeat=3,
            creation=False,
            block_s=0.002,
            settle_s=0.0,
        )
        return runner.run_benchmark(cfg)
    finally:
        mp.undo()


def test_report_structure(tiny_report: dict[str, Any]) -> None:
    assert tiny_report["config"]["threads"] == [1, 2]
    assert len(tiny_report["load_average_start"]) == 3
    env = tiny_report["environment"]
    assert env["versions"]["onnxruntime"] != "not installed"
    assert isinstance(env["blas"], list)
    (m,) = tiny_report["models"]
    assert m["name"] == "tiny_ops_chain(20)" and m["nodes"] == 20
    cells = {(c["runtime"], c["threads"]) for c in m["cells"]}
    expected = {(rt, t) for rt in runner.RUNTIMES if rt != "reference" for t in (1, 2)}
    assert cells == expected | {("reference", 1)}
    for c in m["cells"]:
        assert c["n"] == len(c["samples_ms"]) >= c["rounds"]
        assert c["rounds"] == (3 if c["runtime"] != "reference" else min(3, c["rounds"]))
        if c["runtime"] != "onnxruntime":
            p = c["parity_vs_onnxruntime"]
            assert p["pass"], p  # same arithmetic in every runtime for this chain


def test_ratios_come_from_measured_medians(tiny_report: dict[str, Any]) -> None:
    (m,) = tiny_report["models"]
    for c in m["cells"]:
        assert c["median_ms"] == pytest.approx(statistics.median(c["samples_ms"]), rel=1e-3)
    med = {(c["runtime"], c["threads"]): c["median_ms"] for c in m["cells"]}
    for th in ("1", "2"):
        ratios = m["ratios_to_onnxruntime"][th]
        for rt, r in ratios.items():
            assert r == pytest.approx(med[(rt, int(th))] / med[("onnxruntime", int(th))])
    assert set(m["ratios_to_onnxruntime"]["2"]) == {"turnout_cpu", "turnout_numba"}
    summ = tiny_report["summary"]
    g = summ["geomean_ratios_to_onnxruntime"]["1"]["turnout_numba"]
    assert g["geomean"] == pytest.approx(m["ratios_to_onnxruntime"]["1"]["turnout_numba"])
    t = summ["targets"]["numba/ort geomean <= 1.5 (1t)"]
    assert t["met"] == (t["value"] <= 1.5)
    speedup = med[("reference", 1)] / med[("turnout_numba", 1)]
    assert summ["reference_speedup_1t"] == [pytest.approx(speedup)]


def test_markdown(tiny_report: dict[str, Any]) -> None:
    md = report.to_markdown(tiny_report)
    header = next(ln for ln in md.splitlines() if ln.startswith("| model | threads"))
    assert "numba/ort" in header and "parity" in header
    rows = [ln for ln in md.splitlines() if ln.startswith("| tiny_ops_chain(20) |")]
    assert len(rows) == 2 + 1  # one per thread count, one in the session-creation table
    assert "Geometric means" in md


def test_parity_detects_differences() -> None:
    e = np.array([1.0, 2.0, np.nan], np.float32)
    assert runner.parity([e.copy()], [e])["pass"]
    bad = runner.parity([e + np.float32(0.01)], [e])
    assert not bad["pass"] and math.isclose(bad["max_abs"], 0.01, rel_tol=1e-3)
    assert not runner.parity([e.astype(np.float64)], [e])["pass"]
    assert not runner.parity([np.array([1.0, 2.0, 3.0], np.float32)], [e])["pass"]  # NaN moved
    assert not runner.parity([np.array([1, 2])], [np.array([1, 3])])["pass"]


def test_light_model_weights_are_random_initializers() -> None:
    m = zoo.light_model("squeezenet")
    assert not any(n.op_type == "ConstantOfShape" for n in m.graph.node)
    assert m.ir_version >= 4
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    assert not {i.name for i in m.graph.input} & set(inits)
    w = inits["conv1_w_0"]
    fan_in = int(np.prod(w.shape[1:]))
    assert w.std() == pytest.approx(np.sqrt(2.0 / fan_in), rel=0.1)
    again = {t.name: t for t in zoo.light_model("squeezenet").graph.initializer}
    assert np.array_equal(w, onnx.numpy_helper.to_array(again["conv1_w_0"]))  # seeded
    onnx.checker.check_model(m)
    assert list(zoo.feeds(m)) == ["data_0"]


def test_unknown_model_is_an_error() -> None:
    with pytest.raises(KeyError, match="unknown model"):
        zoo.get("no_such_model")


def test_cli_options_match_the_runner() -> None:
    from turnout.cli import build_parser

    def options(p: argparse.ArgumentParser) -> set[str]:
        return {s for a in p._actions for s in a.option_strings} - {"-h", "--help"}

    ref = argparse.ArgumentParser()
    runner.add_arguments(ref)
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert options(sub.choices["bench"]) == options(ref)
