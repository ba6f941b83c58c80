"""QEmbedLayerNormalization (com.microsoft) against onnxruntime's CPU kernel: uint8 and int8
tables, with and without the segment inputs and the mask; outputs within 0.1% of the range."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN

BATCH, SEQ, HIDDEN, VOCAB = 2, 6, 16, 30


def _quantized(
    rng: np.random.Generator, shape: tuple[int, ...], dt: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random float tensor quantized per tensor: (codes, scale, zero point)."""
    x = rng.standard_normal(shape).astype(np.float32)
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    info = np.iinfo(dt)
    scale = np.float32((hi - lo) / (info.max - info.min))
    zp = np.clip(np.rint(info.min - lo / scale), info.min, info.max)
    q = np.clip(np.rint(x / scale) + zp, info.min, info.max).astype(dt)
    return q, np.array(scale, np.float32), np.array(zp, dt)


@pytest.mark.parametrize("with_mask", [True, False])
@pytest.mark.parametrize("with_segment", [True, False])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qembed_layer_normalization(
    contrib_parity: Any, rng: np.random.Generator, dt: Any, with_segment: bool, with_mask: bool
) -> None:
    shapes = [(VOCAB, HIDDEN), (SEQ, HIDDEN), (2, HIDDEN), (HIDDEN,), (HIDDEN,)]
    tables = [_quantized(rng, s, dt) for s in shapes]
    if not with_segment:
        tables[2] = (None, None, None)  # type: ignore[assignment]
    mask = np.ones((BATCH, SEQ), np.int32)
    mask[1, 4:] = 0
    inputs: list[Any] = [
        rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32),
        rng.integers(0, 2, (BATCH, SEQ)).astype(np.int32) if with_segment else None,
        *(t[0] for t in tables),
        mask if with_mask else None,
        *(t[1] for t in tables),
        *(t[2] for t in tables),
    ]
    names = ["" if v is None else f"i{i}" for i, v in enumerate(inputs)]
    node = helper.make_node(
        "QEmbedLayerNormalization", names, ["y", "mask_index"], domain=DOMAIN, epsilon=1e-5
    )
    contrib_parity(node, inputs)
