"""Fallback-mode conformance: failures in nodes the CPU provider ran fall under its reviewed list
(labelled as inherited in every report format), a case counts as exercised only when the
provider under test ran one of its nodes, and a provider's own wrong node is never excused."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("turnout_conformance", reason="pip install ./conformance")

from turnout.sdk.plugins import registry
from turnout.sdk.provider import ExecutionProvider, KernelRegistry, ProviderFactory
from turnout.tools.cli import main
from turnout_conformance.attribution import culprit_of_error
from turnout_conformance.expected import ExpectedFailures, classify
from turnout_conformance.report import Report
from turnout_conformance.runner import CPU, Result

NAME = "FallbackTestExecutionProvider"
CPU_LIST = {"test_bernoulli.*": "random", "test_resize_x": "spec"}


def _result(case: str, status: str, culprit: str = "", placement: str = "some") -> Result:
    return Result(
        NAME, case, "node", "Op", status, 0.0, "msg", placement=placement, culprit=culprit
    )


@pytest.mark.parametrize(
    ("case", "status", "culprit", "own", "final", "expected_from"),
    [
        ("test_bernoulli", "failed", CPU, {}, "xfail", CPU),  # the CPU provider's node failed
        ("test_bernoulli", "crash", CPU, {}, "xfail", CPU),
        ("test_other", "failed", CPU, {}, "failed", None),  # not in the CPU provider's list
        ("test_bernoulli", "failed", NAME, {}, "failed", None),  # the provider's own node
        ("test_bernoulli", "failed", NAME, {"test_bernoulli": "ours"}, "xfail", None),
        ("test_bernoulli", "failed", "", {}, "failed", None),  # unknown: the provider's
        ("test_bernoulli", "passed", "", {}, "passed", None),  # inherited entries never xpass
        ("test_bernoulli", "passed", "", {"test_bernoulli": "ours"}, "xpass", None),
        ("test_resize_x", "failed", CPU, {"test_resize_x": "ours"}, "xfail", CPU),
    ],
)
def test_classify_inherits_only_the_cpu_providers_failures(
    case: str,
    status: str,
    culprit: str,
    own: Mapping[str, str],
    final: str,
    expected_from: str | None,
) -> None:
    r = _result(case, status, culprit)
    classify(r, ExpectedFailures(own), {CPU: ExpectedFailures(CPU_LIST)})
    assert (r.status, r.expected_from) == (final, expected_from)
    if expected_from is not None:
        assert r.label() == f"expected failure (inherited from {CPU}: {r.expected})"
        assert r.expected in CPU_LIST.values()


def test_isolated_mode_inherits_nothing() -> None:
    r = _result("test_bernoulli", "failed", CPU)
    classify(r, ExpectedFailures({}), {})
    assert r.status == "failed"


def test_culprit_of_error_reads_turnouts_node_messages() -> None:
    names = (NAME, CPU)
    run = f"run (data set 0): RuntimeException: node 'n1' (Foo) on {CPU}: boom"
    assert culprit_of_error(run, None, names) == CPU
    build = f"session creation: EPFail: node 'n2' (Foo): {NAME} could not build its kernel: x"
    assert culprit_of_error(build, None, names) == NAME
    assert culprit_of_error("session creation: ValueError: bad model", None, names) == ""


def test_report_counts_exercised_and_labels_inherited_failures(tmp_path: Path) -> None:
    results = [
        _result("test_relu", "passed", placement="all"),
        _result("test_add_int", "passed", placement="none"),
        _result("test_bernoulli", "failed", CPU, placement="some"),
        _result("test_resize_x", "failed", CPU, placement="none"),
    ]
    for r in results:
        classify(r, ExpectedFailures({}), {CPU: ExpectedFailures(CPU_LIST)})
    report = Report(results, mode="fallback", providers=[NAME], kinds=["node"], wall_seconds=1.0)
    counts = report.summary()[NAME]
    assert {k: counts[k] for k in ("cases", "claimed", "exercised", "not_exercised")} == {
        "cases": 4,
        "claimed": 1,
        "exercised": 2,
        "not_exercised": 2,
    }
    assert (counts["xfail"], counts["inherited"], report.ok) == (2, 2, True)
    label = f"expected failure (inherited from {CPU}: random)"
    assert label in report.to_text()
    assert label in report.to_markdown()
    assert "| Op | 2/4 (2 xfail, 2 inherited, 2 exercised) |" in report.to_markdown()
    data = json.loads(report.to_json())
    by_case = {r["case"]: r for r in data["results"]}
    assert by_case["test_bernoulli"]["label"] == label
    assert by_case["test_add_int"]["exercised"] is False
    skipped = [e.get("message") for e in ET.fromstring(report.to_junit()).iter("skipped")]
    assert label in skipped


def test_cpu_list_names_image_decoder_only_without_pillow() -> None:
    code = (
        "import sys; sys.modules['PIL'] = None\n"
        "from turnout.providers.cpu.expected_failures import EXPECTED_FAILURES as E\n"
        "print(repr(E.get('test_image_decoder_decode_.*')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "Pillow is not installed" in out
    from turnout.providers.cpu.expected_failures import EXPECTED_FAILURES

    assert ("test_image_decoder_decode_.*" in EXPECTED_FAILURES) is not _has_pillow()


def _has_pillow() -> bool:
    from importlib.util import find_spec

    return find_spec("PIL") is not None


# --------------------------------------------------------------------------------------------
# Real runs: a provider that claims Greater (inside the expanded Bernoulli cases) and Relu


def _greater(node: Any) -> Any:
    return lambda a, b: (np.greater(a, b),)


def _wrong_greater(node: Any) -> Any:
    # the seeded case's input equals its random draws, so an off-by-equality bug shows
    return lambda a, b: (np.greater_equal(a, b),)


class _Provider(ExecutionProvider):
    name = NAME

    def __init__(self, kernels: KernelRegistry, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.kernels = kernels


class _Factory(ProviderFactory):
    name = NAME
    aliases = ("fallback-ep",)

    def __init__(self, greater: Any) -> None:
        self.registry = KernelRegistry(NAME)
        self.registry.register("Greater")(greater)
        self.registry.register("Relu")(lambda node: lambda x: (np.maximum(x, 0),))

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return _Provider(self.registry, options)


@pytest.fixture
def register() -> Iterator[Any]:
    def add(greater: Any) -> None:
        registry.register(_Factory(greater))

    yield add
    registry.unregister(NAME)


CASES = (
    "^test_(relu|abs|bernoulli_seed_expanded|bernoulli_expanded"
    "|resize_downsample_scales_linear_align_corners)$"
)


def _run(tmp_path: Path, mode: str = "fallback") -> tuple[int, dict[str, Any]]:
    out = tmp_path / "r.json"
    args = ["conformance", "--provider", "fallback-ep", "--mode", mode, "--kinds", "node"]
    rc = main([*args, "-k", CASES, "-j", "1", "-q", "--json", str(out)])
    return rc, json.loads(out.read_text())


@pytest.mark.slow
def test_fallback_run_inherits_and_counts(register: Any, tmp_path: Path) -> None:
    register(_greater)
    rc, report = _run(tmp_path)
    by_case = {r["case"]: r for r in report["results"]}
    assert {c: r["placement"] for c, r in by_case.items()} == {
        "test_relu": "all",
        "test_abs": "none",
        "test_bernoulli_expanded": "some",  # RandomUniformLike and Cast ran on the CPU provider
        "test_bernoulli_seed_expanded": "some",
        "test_resize_downsample_scales_linear_align_corners": "none",
    }
    for case in ("test_bernoulli_expanded", "test_resize_downsample_scales_linear_align_corners"):
        assert by_case[case]["status"] == "xfail", by_case[case]
        assert by_case[case]["label"].startswith(f"expected failure (inherited from {CPU}: ")
    summary = report["summary"][NAME]
    assert (summary["claimed"], summary["exercised"], summary["not_exercised"]) == (1, 3, 2)
    assert rc == 0


@pytest.mark.slow
def test_a_wrong_node_of_the_provider_is_not_excused(register: Any, tmp_path: Path) -> None:
    """The seeded Bernoulli draws the same numbers on both sides of the comparison, so the
    provider's wrong Greater shows as a difference of its own: its failure, not inherited."""
    register(_wrong_greater)
    rc, report = _run(tmp_path)
    by_case = {r["case"]: r for r in report["results"]}
    seeded = by_case["test_bernoulli_seed_expanded"]
    assert (seeded["status"], seeded["culprit"], seeded["expected_from"]) == ("failed", NAME, None)
    assert rc == 1


@pytest.mark.slow
def test_pytest_plugin_fallback_mode_inherits(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "import numpy as np, turnout\n"
        "from turnout.sdk.provider import ExecutionProvider, KernelRegistry, ProviderFactory\n"
        f"K = KernelRegistry({NAME!r})\n"
        "K.register('Relu')(lambda node: (lambda x: (np.maximum(x, 0),)))\n"
        "class P(ExecutionProvider):\n"
        f"    name = {NAME!r}\n"
        "    def __init__(self, options=None):\n"
        "        super().__init__(options)\n"
        "        self.kernels = K\n"
        "class F(ProviderFactory):\n"
        f"    name = {NAME!r}\n"
        "    def _create(self, options):\n"
        "        return P(options)\n"
        "turnout.register_provider(F())\n"
    )
    args = ["-p", "turnout_conformance", "--turnout-provider", NAME, "--turnout-mode", "fallback"]
    args += ["--turnout-kinds", "node", "-k", "test_relu or test_bernoulli_expanded"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert "2 passed" in out and "1 xfailed" in out, out  # test_relu, its expanded twin
    assert f"inherited from {CPU}" in out, out
    assert proc.returncode == 0
