"""DFT, STFT and MelWeightMatrix on the emulated backend against onnx.reference beyond the node
cases: dft_length that pads or truncates, float64, a one-sided forward transform, an inner axis,
windows and frame steps, and the shared check for an axis naming the (real, imaginary)
dimension."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.sdk.semantics.spectral import dft_plan

CASES = [
    (7, 1, 0, 0, 1),  # pad the signal to 7 points
    (3, 2, 0, 1, 1),  # truncate, one-sided
    (6, 2, 0, 0, 2),  # pad complex input
    (8, 1, 1, 1, 2),  # one-sided inverse: real output of 8 points
    (None, 1, 1, 0, 2),
]


@pytest.mark.parametrize(("length", "axis", "inverse", "onesided", "comp"), CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dft(
    node_check: Any, length: Any, axis: int, inverse: int, onesided: int, comp: int, dtype
):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 5, 4, comp)).astype(dtype)
    feeds: dict[str, Any] = {"x": x}
    names = ["x", "", "axis"]
    if length is not None:
        feeds["n"] = np.array(length, np.int64)
        names[1] = "n"
    feeds["axis"] = np.array(axis, np.int64)
    node = helper.make_node("DFT", names, ["y"], inverse=inverse, onesided=onesided)
    node_check.against_reference(node, feeds, 20, 1e-5)


def test_dft_axis_must_not_be_the_component_axis() -> None:
    with pytest.raises(InvalidArgument, match=r"dft0: axis -1 must name a signal axis"):
        dft_plan("dft0", (2, 5, 1), -1, None, False, False)


@pytest.mark.parametrize(
    ("step", "with_window", "onesided", "comp"), [(3, True, 1, 1), (5, False, 0, 2)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stft(node_check: Any, step: int, with_window: bool, onesided: int, comp: int, dtype):
    rng = np.random.default_rng(10)
    feeds: dict[str, Any] = {
        "x": rng.standard_normal((2, 40, comp)).astype(dtype),
        "step": np.array(step, np.int64),
    }
    names = ["x", "step", "", "n"]
    if with_window:
        feeds["w"] = np.hanning(8).astype(dtype)
        names[2] = "w"
    feeds["n"] = np.array(8, np.int64)
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    node_check.against_reference(node, feeds, 17, 1e-5)


@pytest.mark.parametrize(
    ("bins", "n", "rate", "lo", "hi", "out"),
    [(8, 64, 16000, 100.0, 7000.0, 1), (20, 16, 8000, 0.0, 3900.0, 11)],  # 20 bins: empty rises
)
def test_mel_weight_matrix(
    node_check: Any, bins: int, n: int, rate: int, lo: float, hi: float, out
):
    feeds = {
        "bins": np.array(bins, np.int32),
        "n": np.array(n, np.int32),
        "rate": np.array(rate, np.int32),
        "lo": np.array(lo, np.float32),
        "hi": np.array(hi, np.float32),
    }
    node = helper.make_node("MelWeightMatrix", list(feeds), ["w"], output_datatype=out)
    node_check.against_reference(node, feeds, 17, 1e-6)
