"""`python -m benchmarks alone`: ratios and busy slowdowns come from the samples' medians, and a
real run of one small model (both runtimes, fresh processes) gives a row."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from benchmarks import alone


def _samples(ort: list[float], tn: list[float], ort_busy: list[float], tn_busy: list[float]) -> Any:
    def cells(values: list[float]) -> list[dict[str, float]]:
        return [{"median": v, "cpu_per_wall": 1.0} for v in values]

    return {
        "onnxruntime": {"quiet": cells(ort), "busy": cells(ort_busy)},
        "turnout": {"quiet": cells(tn), "busy": cells(tn_busy)},
    }


def test_ratios_and_slowdowns_are_of_medians() -> None:
    results = {"m": {0: _samples([0.002, 0.004, 0.003], [0.006, 0.009, 0.003], [0.006], [0.012])}}
    table = alone.markdown(results, busy=True)
    row = next(line for line in table.splitlines() if line.startswith("| m |"))
    # medians 3 ms and 6 ms: ratio 2; slowdowns 6/3 = 2 and 12/6 = 2: ratio of slowdowns 1
    assert "| 3.00 | 6.00 | 2.00 |" in row
    assert row.rstrip().endswith("2.00 | 2.00 | 1.00 |")
    assert "**default**" in table


def test_a_failed_cell_is_an_error_row() -> None:
    bad = _samples([0.001], [0.001], [0.001], [0.001])
    bad["turnout"]["quiet"] = [{"error": "boom"}]
    assert "| m | error |" in alone.markdown({"m": {1: bad}}, busy=False)


def test_one_small_model_alone(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="the baseline of every ratio")
    ((name, path, feeds),) = alone.model_files("tiny_ops_chain", tmp_path)
    args = argparse.Namespace(rounds=1, seconds=0.05, busy=False)
    samples = alone.measure(name, path, feeds, 1, args)
    for rt in alone.RUNTIMES:
        (cell,) = samples[rt]["quiet"]
        assert "error" not in cell, cell
        assert cell["median"] > 0 and cell["runs"] >= 5
