"""Beside onnxruntime.quantization on benchmark-shaped models (slow: real-size convolutions):
turnout's quantized models run the same on both runtimes, are as small as onnxruntime's, and
agree with the float model's top-1 about as often."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import quantization as bench  # noqa: E402

pytest.importorskip("onnxruntime.quantization", reason="the sweep compares with it")


def _specs() -> dict[str, bench.QuantModel]:
    from turnout_testbed import apps, zoo

    def resnet() -> onnx.ModelProto:
        return zoo.resnet18_like(size=32)

    return {
        "resnet18_like(32)": bench.QuantModel(resnet, bench._random_feeds(resnet)),
        "text_cnn_like": bench.QuantModel(
            apps.text_cnn_like, lambda s: apps.text_cnn_feeds(seed=s)
        ),
    }


@pytest.mark.slow
@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("name", ["resnet18_like(32)", "text_cnn_like"])
def test_parity_with_onnxruntime_quantization(name: str) -> None:
    for row in bench.measure(name, _specs()[name], n_calib=8, n_eval=32, numpy_only=True):
        label = f"{name} {row['method']}"
        assert row["gap_turnout"] < 0.02, label
        assert row["size_turnout"] <= 1.02 * row["size_ort"], label
        assert row["top1_turnout"] >= row["top1_ort"] - 0.1, label
