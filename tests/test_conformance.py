"""turnout-conformance: the runner classifies wrong, declining, crashing and hanging providers and
keeps going; expected-failure lists only shrink; reports parse; the pytest plugin and `turnout
compare` work. Test providers are registered in-process; the runner forks after that."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

pytest.importorskip("turnout_conformance", reason="pip install ./conformance")

from turnout.sdk.plugins import registry
from turnout.sdk.provider import ExecutionProvider, KernelRegistry, ProviderFactory
from turnout.tools.cli import main
from turnout_conformance.compare import compare_model
from turnout_conformance.expected import ExpectedFailures

NAME = "ConformanceTestExecutionProvider"
KERNELS = KernelRegistry(NAME)


@KERNELS.register("Abs")
def _abs(node: Any) -> Any:
    return lambda x: (np.abs(x),)


@KERNELS.register("Ceil")
def _ceil(node: Any) -> Any:
    return lambda x: (np.ceil(x),)


@KERNELS.register("Tanh")
def _tanh(node: Any) -> Any:
    return lambda x: (np.tanh(x),)


@KERNELS.register("Relu")
def _wrong_relu(node: Any) -> Any:
    return lambda x: (x,)  # wrong on purpose: a capability that lies


@KERNELS.register("Neg")
def _segfault(node: Any) -> Any:
    def run(x: Any) -> Any:
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return (-x,)

    return run


@KERNELS.register("Floor")
def _hang(node: Any) -> Any:
    def run(x: Any) -> Any:
        time.sleep(60)
        return (np.floor(x),)

    return run


class _Provider(ExecutionProvider):
    name = NAME

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.kernels = KERNELS


class _Factory(ProviderFactory):
    name = NAME
    aliases = ("conftest-ep",)

    def __init__(self, expected: Mapping[str, str] | None = None) -> None:
        self._expected = dict(expected or {})

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return _Provider(options)

    def expected_failures(self) -> Mapping[str, str]:
        return self._expected


@pytest.fixture
def provider() -> Iterator[_Factory]:
    factory = _Factory()
    registry.register(factory)
    yield factory
    registry.unregister(NAME)


def _conformance(tmp_path: Path, pattern: str, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "report.json"
    rc = main(
        [
            "conformance",
            "--provider",
            "conftest-ep",
            "-k",
            pattern,
            "--kinds",
            "node",
            "--json",
            str(out),
            "-q",
            *extra,
        ]
    )
    return rc, json.loads(out.read_text())


def _statuses(report: dict[str, Any]) -> dict[str, str]:
    return {r["case"]: r["status"] for r in report["results"]}


# Sorted by name, so with one worker the passing cases run after the crash and the hang.
CASES = "^test_(abs|ceil|floor|neg|relu|sqrt|tanh)$"


@pytest.mark.slow
def test_runner_classifies_and_keeps_going(provider: _Factory, tmp_path: Path) -> None:
    junit, md = tmp_path / "junit.xml", tmp_path / "report.md"
    rc, report = _conformance(
        tmp_path, CASES, "-j", "1", "--timeout", "2", "--junit", str(junit), "--markdown", str(md)
    )
    assert _statuses(report) == {
        "test_abs": "passed",
        "test_ceil": "passed",
        "test_floor": "timeout",
        "test_neg": "crash",
        "test_relu": "failed",
        "test_sqrt": "unclaimed",
        "test_tanh": "passed",  # after the crash and the timeout: the run went on
    }
    assert rc == 1
    by_case = {r["case"]: r for r in report["results"]}
    assert "SIGSEGV" in by_case["test_neg"]["message"]
    assert "wrong outputs" in by_case["test_relu"]["message"]
    assert "no kernel for ai.onnx::Sqrt" in by_case["test_sqrt"]["message"]
    summary = report["summary"][NAME]
    assert (summary["claimed"], summary["passed"], summary["unclaimed"]) == (6, 3, 1)
    # JUnit: one suite, failures/errors/skips counted as CI systems read them
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("7", "1", "2")
    assert suite.get("skipped") == "1"
    text = md.read_text()
    assert "| Relu | 0/1 (1 failed) |" in text
    # cases, claimed, exercised, not exercised, then the statuses, then inherited
    assert f"| {NAME} | 7 | 6 | 6 | 1 | 3 | 1 | 1 | 1 | 1 | 0 | 0 | 0 |" in text


@pytest.mark.slow
def test_parallel_workers_and_fallback_mode(provider: _Factory, tmp_path: Path) -> None:
    rc, report = _conformance(
        tmp_path, "^test_(abs|ceil|sqrt|tanh)", "-j", "2", "--mode", "fallback"
    )
    statuses = _statuses(report)
    assert statuses["test_sqrt"] == "passed"  # declined by the provider, run by CPU behind it
    assert set(statuses.values()) == {"passed"} and len(statuses) >= 4
    assert rc == 0


@pytest.mark.slow
def test_expected_failures_xfail_and_stale_entries(provider: _Factory, tmp_path: Path) -> None:
    provider._expected = {"test_rel.*": "Relu returns its input on purpose"}
    rc, report = _conformance(tmp_path, "^test_(abs|relu)$")
    assert _statuses(report) == {"test_abs": "passed", "test_relu": "xfail"}
    assert rc == 0  # nothing unexpected
    provider._expected = {"test_abs": "stale: Abs is fine", "test_relu": "on purpose"}
    rc, report = _conformance(tmp_path, "^test_(abs|relu)$")
    assert _statuses(report) == {"test_abs": "xpass", "test_relu": "xfail"}
    assert rc == 1  # the stale entry fails the run, so the list shrinks


def test_expected_failure_matching() -> None:
    ex = ExpectedFailures({"test_a": "exact", "test_b.*_expanded": "regex", "light/x": "kind"})
    assert ex.match("test_a") == ("test_a", "exact")
    assert ex.match("test_ab") is None  # exact names do not prefix-match
    assert ex.match("test_bx_expanded") == ("test_b.*_expanded", "regex")
    assert ex.match("x", "light") == ("light/x", "kind")


@pytest.mark.slow
def test_unknown_provider_and_no_cases(tmp_path: Path) -> None:
    assert main(["conformance", "--provider", "no-such-ep", "-k", "^test_abs$"]) == 2
    assert main(["conformance", "--provider", "cpu", "-k", "^nothing$", "--kinds", "light"]) == 2


@pytest.mark.slow
def test_cpu_light_model_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    rc = main(
        [
            "conformance",
            "--provider",
            "cpu",
            "--kinds",
            "light",
            "-k",
            "alexnet",
            "-q",
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert _statuses(report) == {"light_bvlc_alexnet": "passed"}
    assert rc == 0


PLUGIN_CONFTEST = """
import numpy as np
import turnout
from turnout.sdk.provider import ExecutionProvider, KernelRegistry, ProviderFactory

K = KernelRegistry("PluginTestExecutionProvider")
K.register("Relu")(lambda node: (lambda x: (np.maximum(x, 0),)))   # right
K.register("Sign")(lambda node: (lambda x: (x,)))                   # wrong
K.register("Shrink")(lambda node: (lambda x: (x,)))                 # wrong, but listed

class P(ExecutionProvider):
    name = "PluginTestExecutionProvider"
    def __init__(self, options=None):
        super().__init__(options)
        self.kernels = K

class F(ProviderFactory):
    name = "PluginTestExecutionProvider"
    def _create(self, options):
        return P(options)
    def expected_failures(self):
        return {"test_shrink": "Shrink returns its input on purpose"}

turnout.register_provider(F())
"""


@pytest.mark.slow
def test_pytest_plugin(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(textwrap.dedent(PLUGIN_CONFTEST))
    args = ["-p", "turnout_conformance", "--turnout-provider", "PluginTestExecutionProvider"]
    args += ["--turnout-kinds", "simple", "-k", "relu or sign or shrink or expand_shape_model1"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert "1 failed, 1 passed, 1 skipped" in out and "1 xfailed" in out, out
    assert "FAILED turnout-conformance[PluginTestExecutionProvider]::test_sign_model" in out
    assert "no kernel for ai.onnx::Expand" in out  # the skip carries the decline reason
    assert proc.returncode == 1


@pytest.mark.slow
def test_compare_finds_a_planted_wrong_kernel(provider: _Factory) -> None:
    from onnx.backend.test.loader import DATA_DIR

    path = Path(DATA_DIR) / "light" / "light_bvlc_alexnet.onnx"
    result = compare_model(path, "conftest-ep", "cpu")
    first = result.first
    assert first is not None
    relus = [(i, n) for i, n in enumerate(onnx.load(path).graph.node) if n.op_type == "Relu"]
    index, node = relus[0]
    assert (first.node, first.op_type, first.introduced) == (
        node.name or f"Relu_{index}",
        "Relu",
        True,
    )
    assert first.placed_on == {"conftest-ep": NAME, "cpu": "CPUExecutionProvider"}
    assert f"first divergence: value {node.output[0]!r} from node {first.node!r} (Relu)" in (
        result.to_text()
    )


def test_compare_cli_against_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Tanh", ["r"], ["y"], name="tanh"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    np.save(tmp_path / "x.npy", np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    assert main(["compare", str(path), "--providers", "cpu,reference"]) == 0
    assert "no value differs" in capsys.readouterr().out
    registry.register(_Factory())
    try:
        inputs = ["--inputs", f"x={tmp_path / 'x.npy'}"]
        assert main(["compare", str(path), "--providers", "conftest-ep,reference", *inputs]) == 1
    finally:
        registry.unregister(NAME)
    out = capsys.readouterr().out
    assert "first divergence: value 'r' from node 'relu' (Relu)" in out
    assert "'y' <- 'tanh' (Tanh)" in out and "inherited" in out


def test_commands_without_the_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [m for m in sys.modules if m.startswith("turnout_conformance")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "turnout_conformance", None)  # as if not installed
    assert main(["conformance", "-k", "x"]) == 2
    assert "pip install ./conformance" in capsys.readouterr().err


@pytest.mark.slow
def test_forked_workers_can_use_a_device_runtime(tmp_path: Path) -> None:
    """The parent must not initialize OpenCL before forking: workers would hang in it."""
    from turnout_conformance.cli import probe_out_of_process

    if not probe_out_of_process().get("OpenCLExecutionProvider", (False, None))[0]:
        pytest.skip("no OpenCL device here (the OpenCL provider's probe says so)")
    out = tmp_path / "r.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnout",
            "conformance",
            "--provider",
            "opencl",
            "--kinds",
            "node",
            "-k",
            "^test_add$",
            "-j",
            "1",
            "--timeout",
            "60",
            "-q",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert '"passed"' in out.read_text()
