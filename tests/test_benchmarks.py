"""The benchmark suite's runner and report: structure and arithmetic, never wall times."""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import benchmarks  # noqa: E402
from benchmarks import report, runner, zoo  # noqa: E402

pytest.importorskip("onnxruntime")
pytest.importorskip("turnout_numba", reason="the harness times turnout's host path (turnout-numba)")


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
            profile=True,
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
    assert set(m["ratios_to_onnxruntime"]["2"]) == set(runner.TURNOUT)
    summ = tiny_report["summary"]
    g = summ["geomean_ratios_to_onnxruntime"]["1"]["turnout_numba"]
    assert g["geomean"] == pytest.approx(m["ratios_to_onnxruntime"]["1"]["turnout_numba"])
    t = summ["targets"]["numba/ort geomean <= 1.5 (1t)"]
    assert t["met"] == (t["value"] <= 1.5) and t["issue"] == 5
    t = summ["targets"]["cpu(host)/ort geomean <= 1.3 (1t)"]
    assert t["value"] == pytest.approx(m["ratios_to_onnxruntime"]["1"]["turnout_cpu"])
    assert t["met"] == (t["value"] <= 1.3) and t["issue"] == 13
    t = summ["targets"]["cpu numpy-only/ort geomean <= 2.0 (2t)"]
    assert t["value"] == pytest.approx(m["ratios_to_onnxruntime"]["2"]["turnout_cpu_numpy"])
    speedup = med[("reference", 1)] / med[("turnout_numba", 1)]
    assert summ["reference_speedup_1t"] == [pytest.approx(speedup)]


def test_markdown(tiny_report: dict[str, Any]) -> None:
    md = report.to_markdown(tiny_report)
    header = next(ln for ln in md.splitlines() if ln.startswith("| model | threads"))
    for col in ("cpu/ort", "cpu numpy/ort", "numba/ort", "parity"):
        assert f"| {col} |" in header
    rows = [ln for ln in md.splitlines() if ln.startswith("| tiny_ops_chain(20) |")]
    assert len(rows) == 2 + 1  # one per thread count, one in the in-process creation table
    assert "Geometric means" in md
    assert md.index("Targets (issue 13)") < md.index("Targets (issue 5)")
    assert "turnout_cpu_numpy nodes ran on: CPUExecutionProvider 20." in md
    for short in ("cpu", "cpu numpy", "numba"):
        assert f"- tiny_ops_chain(20) {short} (1t): wall " in md


def test_profile_is_per_turnout_runtime(tiny_report: dict[str, Any]) -> None:
    (m,) = tiny_report["models"]
    assert set(m["profile"]) == set(runner.TURNOUT)
    numpy_only = m["profile"]["turnout_cpu_numpy"]
    assert numpy_only["steps_per_run"] == 20
    assert set(numpy_only["by_provider_ms"]) == {"CPUExecutionProvider"}
    assert sum(numpy_only["top_ops_ms"].values()) == pytest.approx(numpy_only["node_ms"])


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
    from turnout.tools.cli import build_parser

    def options(p: argparse.ArgumentParser) -> set[str]:
        return {s for a in p._actions for s in a.option_strings} - {"-h", "--help"}

    ref = argparse.ArgumentParser()
    runner.add_arguments(ref)
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert options(sub.choices["bench"]) == options(ref)


def test_cpu_cells_set_the_numpy_switch_explicitly(tiny_report: dict[str, Any]) -> None:
    """turnout_cpu asks for the host even where TURNOUT_CPU_NUMPY_ONLY is set (as in these
    tests); turnout_cpu_numpy asks for the numpy kernels."""
    model = zoo.get("tiny_ops_chain(3)").build().SerializeToString()
    for rt, value in (("turnout_cpu", "0"), ("turnout_cpu_numpy", "1")):
        opts = runner.make_session(rt, model, 2).get_session_options()
        assert opts.get_session_config_entry(runner.CPU_NUMPY_ONLY_KEY) == value
        assert opts.intra_op_num_threads == 2
    (m,) = tiny_report["models"]
    numpy_cells = [c for c in m["cells"] if c["runtime"] == "turnout_cpu_numpy"]
    assert all(set(c["placement"]) == {"CPUExecutionProvider"} for c in numpy_cells)


def _fake_model(name: str, medians: dict[str, float], creation: dict[str, float],
                first_cpu_s: float) -> dict[str, Any]:  # fmt: skip
    """A model entry as bench_model writes it, at 1 and 2 threads, with made-up times."""
    cells = [{"runtime": rt, "threads": th, "median_ms": ms * th, "first_run_ms": 3 * ms * th}
             for rt, ms in medians.items() for th in (1, 2)]  # fmt: skip
    ratios = {str(th): {rt: medians[rt] / medians["onnxruntime"]
                        for rt in medians if rt != "onnxruntime"} for th in (1, 2)}  # fmt: skip
    warm = {rt: {"status": "ok", "create_s": s, "first_run_s": None} for rt, s in creation.items()}
    warm["turnout_cpu"]["first_run_s"] = first_cpu_s
    return {"name": name, "cells": cells, "ratios_to_onnxruntime": ratios,
            "session_creation": {"child_threads": 2, "warm": warm}}  # fmt: skip


def test_issue_13_targets_arithmetic() -> None:
    ms = {"turnout_cpu": 1.0, "turnout_cpu_numpy": 3.0, "turnout_numba": 1.0, "onnxruntime": 1.0}
    a = _fake_model("a", {**ms, "turnout_cpu": 1.2}, {"turnout_cpu": 2.0, "onnxruntime": 0.5},
                    first_cpu_s=2.4 * 2 * 1.2 / 1e3)  # fmt: skip
    b = _fake_model("b", {**ms, "turnout_cpu": 2.5}, {"turnout_cpu": 0.2, "onnxruntime": 0.2},
                    first_cpu_s=1.5 * 2 * 2.5 / 1e3)  # fmt: skip
    summ = runner.summarize({"models": [a, b]}, [1, 2])
    t = summ["targets"]
    g = math.sqrt(1.2 * 2.5)
    assert t["cpu(host)/ort geomean <= 1.3 (1t)"] == {
        "value": pytest.approx(g), "met": False, "models": 2, "issue": 13}  # fmt: skip
    worst = t["no model cpu(host)/ort above 2.0 (1t)"]
    assert (worst["worst"], worst["above"], worst["met"]) == ("b", ["b"], False)
    assert t["cpu(host)/ort geomean <= 1.5 (2t)"]["value"] == pytest.approx(g)
    assert t["cpu numpy-only/ort geomean <= 2.0 (1t)"]["value"] == pytest.approx(3.0)
    creation = t["session creation cpu(host)/ort, warm cache (child), geomean <= 2.0"]
    assert creation["value"] == pytest.approx(math.sqrt(4.0 * 1.0)) and creation["met"]
    first = t["first run <= 2x steady (cpu host, warm-cache child), every model"]
    assert first["value"] == pytest.approx(2.4) and first["above"] == ["a"]
    assert runner.first_run_ratios(a, "turnout_cpu") == {
        "in_process": pytest.approx(3.0), "warm_child": pytest.approx(2.4)}  # fmt: skip
    assert next(k for k, v in t.items() if v["issue"] == 5) == "numba/ort geomean <= 1.5 (1t)"


def test_app_models_are_in_the_zoo_with_their_inputs() -> None:
    assert set(zoo.APP_MODELS) <= set(zoo.names())
    bm = zoo.get("vad_like")
    assert bm.source == "turnout_testbed.apps"
    proto = bm.build()
    feeds = zoo.model_feeds("vad_like", proto, seed=0)
    assert int(feeds["sr"]) == 16000 and feeds["input"].shape == (1, 512)
    info = zoo.describe(proto)
    assert info["nodes"] == 3 and info["nodes_with_subgraphs"] > 200
    assert list(zoo.model_feeds("mlp", zoo.get("mlp").build())) == ["x"]


def test_import_torch_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(ImportError, match="--import-torch needs torch"):
        benchmarks.import_torch()


def test_import_torch_flag_comes_first() -> None:
    """`python -m benchmarks --import-torch` imports torch before the runner, or exits 2 with
    the reason; an unknown model then stops it before anything runs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "benchmarks", "--import-torch", "--models", "no_such_model"]
    cp = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 2
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "--import-torch needs torch" in cp.stderr
    else:
        assert "unknown model" in cp.stderr


def test_startup_writes_bytecode_as_pip_install_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh processes would otherwise compile an editable install's sources every time."""
    from benchmarks import startup

    package = tmp_path / "bytecode_probe" / "inner"
    package.mkdir(parents=True)
    (tmp_path / "bytecode_probe" / "__init__.py").write_text("X = 1\n")
    (package / "__init__.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    done = startup.write_bytecode(("bytecode_probe", "no_such_package_here"))
    assert done == [str(tmp_path / "bytecode_probe")]
    tag = sys.implementation.cache_tag
    assert (tmp_path / "bytecode_probe" / "__pycache__" / f"__init__.{tag}.pyc").is_file()
    assert (package / "__pycache__" / f"__init__.{tag}.pyc").is_file()
