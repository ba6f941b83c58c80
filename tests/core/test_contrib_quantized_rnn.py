"""DynamicQuantizeLSTM (com.microsoft) against onnxruntime's CPU kernel: forward, reverse and
bidirectional, int8 and uint8 weights with per-direction or per-column parameters, bias,
initial state, sequence lengths, peepholes.

Both round X and every step's hidden state to uint8 before the products with the weights;
turnout's kernel follows onnxruntime's step by step (bit-equal on x86-64, see
tests/quantization/test_dynamic_codes_vs_onnxruntime.py, where the thread split of the batch is
checked too). Held here within 0.1% of the range, against onnxruntime on one thread."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN

STEPS, BATCH, INPUT, HIDDEN = 6, 3, 10, 8
TOL = 1e-3
WEIGHTS = {1, 2, 8, 9, 10, 11}  # initializers, as onnxruntime's quantizer writes them


def _codes(
    rng: np.random.Generator, w: np.ndarray, dt: Any, per_column: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """w [D, rows, 4H] quantized per direction or per column: int8 symmetric, uint8
    asymmetric per direction."""
    axes = (1,) if per_column else (1, 2)
    lo = np.minimum(w.min(axis=axes), 0)
    hi = np.maximum(w.max(axis=axes), 0)
    if dt == np.int8:
        scale = np.maximum(np.abs(lo), hi) / 127
        zp = np.zeros_like(scale)
    elif per_column:  # onnxruntime wants one zero point for every column (128 here)
        scale = np.maximum(np.abs(lo), hi) / 127
        zp = np.full_like(scale, 128)
    else:
        scale = (hi - lo) / 255
        zp = np.rint(-lo / scale)
    shape = (w.shape[0], 1, -1)
    info = np.iinfo(dt)
    q = np.clip(np.rint(w / scale.reshape(shape)) + zp.reshape(shape), info.min, info.max)
    return q.astype(dt), scale.astype(np.float32), zp.astype(dt)


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("per_column", [True, False])
@pytest.mark.parametrize("dt", [np.int8, np.uint8])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_dynamic_quantize_lstm(
    contrib_parity: Any, rng: np.random.Generator, direction: str, dt: Any, per_column: bool
) -> None:
    dirs = 2 if direction == "bidirectional" else 1
    w, ws, wz = _codes(rng, rng.standard_normal((dirs, INPUT, 4 * HIDDEN)) * 0.4, dt, per_column)
    r, rs, rz = _codes(rng, rng.standard_normal((dirs, HIDDEN, 4 * HIDDEN)) * 0.4, dt, per_column)
    x = rng.standard_normal((STEPS, BATCH, INPUT)).astype(np.float32)
    b = (rng.standard_normal((dirs, 8 * HIDDEN)) * 0.1).astype(np.float32)
    inputs = [x, w, r, b, None, None, None, None, ws, wz, rs, rz]
    names = ["" if v is None else f"i{i}" for i, v in enumerate(inputs)]
    node = helper.make_node(
        "DynamicQuantizeLSTM",
        names,
        ["y", "y_h", "y_c"],
        domain=DOMAIN,
        hidden_size=HIDDEN,
        direction=direction,
    )
    contrib_parity(node, inputs, tol=TOL, constant=WEIGHTS)


@pytest.mark.onnxruntime_exact_8bit
def test_dynamic_quantize_lstm_state_lengths_peepholes(
    contrib_parity: Any, rng: np.random.Generator
) -> None:
    w, ws, wz = _codes(rng, rng.standard_normal((1, INPUT, 4 * HIDDEN)) * 0.4, np.int8, True)
    r, rs, rz = _codes(rng, rng.standard_normal((1, HIDDEN, 4 * HIDDEN)) * 0.4, np.int8, True)
    inputs = [
        rng.standard_normal((STEPS, BATCH, INPUT)).astype(np.float32),
        w,
        r,
        None,
        np.array([STEPS, 2, 4], np.int32),
        rng.standard_normal((1, BATCH, HIDDEN)).astype(np.float32),
        rng.standard_normal((1, BATCH, HIDDEN)).astype(np.float32),
        (rng.standard_normal((1, 3 * HIDDEN)) * 0.3).astype(np.float32),
        ws,
        wz,
        rs,
        rz,
    ]
    names = ["" if v is None else f"i{i}" for i, v in enumerate(inputs)]
    node = helper.make_node(
        "DynamicQuantizeLSTM", names, ["", "y_h"], domain=DOMAIN, hidden_size=HIDDEN
    )
    contrib_parity(node, inputs, tol=TOL, constant=WEIGHTS)
