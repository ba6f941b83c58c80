"""benchmarks/quantization.py measures what docs/quantization.md's table shows."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import quantization as bench  # noqa: E402

pytest.importorskip("onnxruntime.quantization", reason="the benchmark compares with it")
pytest.importorskip(
    "turnout_testbed", reason="its models are turnout-testbed's (pip install -e ./testbed)"
)


@pytest.mark.onnxruntime_exact_8bit
def test_rows_hold_every_column() -> None:
    rows: list[dict[str, Any]] = bench.measure("tiny_cnn", bench._models()["tiny_cnn"], 2, 2)
    assert [r["method"] for r in rows] == list(bench.METHODS)
    for row in rows:
        for key in ("size_float", "size_turnout", "size_ort", "top1_turnout", "top1_ort"):
            assert row[key] > 0, key
        assert row["size_turnout"] < row["size_float"] / 2
        assert row["gap_turnout"] < 0.02 and row["gap_ort"] >= 0.0
    table = bench.markdown(rows)
    assert table.count("\n| tiny_cnn |") == len(bench.METHODS)


def test_unknown_model_is_refused() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--models", "nope"])
