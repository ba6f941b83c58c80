"""QAttention (com.microsoft) against onnxruntime's CPU kernel: uint8 input, int8 or uint8
weight with per-tensor or per-column parameters, optional zero points, mask index, past and
present, unidirectional. Float outputs within 0.1% of their range."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN

BATCH, SEQ, HIDDEN, HEADS = 2, 5, 16, 4


def _q(rng: np.random.Generator, shape: tuple[int, ...], dt: Any) -> np.ndarray:
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dt)


def _inputs(rng: np.random.Generator, w_dt: Any, per_column: bool, with_zp: bool) -> list[Any]:
    cols = (3 * HIDDEN,) if per_column else ()
    w_zp: np.ndarray | None = None
    if with_zp:
        w_zp = (
            rng.integers(120, 136, cols).astype(np.uint8)
            if w_dt == np.uint8
            else np.zeros(cols, np.int8)
        )
    return [
        _q(rng, (BATCH, SEQ, HIDDEN), np.uint8),
        _q(rng, (HIDDEN, 3 * HIDDEN), w_dt),
        rng.standard_normal(3 * HIDDEN).astype(np.float32),
        np.array(0.02, np.float32),
        rng.uniform(0.002, 0.01, cols).astype(np.float32),
        None,
        np.array(rng.integers(100, 156), np.uint8) if with_zp else None,
        w_zp,
        None,
    ]


def _node(inputs: list[Any], outputs: list[str], **attrs: Any) -> Any:
    names = ["" if v is None else f"i{i}" for i, v in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    return helper.make_node("QAttention", names, outputs, domain=DOMAIN, num_heads=HEADS, **attrs)


def _present(inputs: list[Any]) -> list[Any]:
    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    return inputs


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize("per_column", [True, False])
@pytest.mark.parametrize("w_dt", [np.int8, np.uint8])
def test_qattention(
    contrib_parity: Any, rng: np.random.Generator, w_dt: Any, per_column: bool, with_zp: bool
) -> None:
    inputs = _inputs(rng, w_dt, per_column, with_zp)
    contrib_parity(_node(inputs, ["y"]), _present(inputs))


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_qattention_mask_and_past(
    contrib_parity: Any, rng: np.random.Generator, unidirectional: int
) -> None:
    inputs = _inputs(rng, np.int8, True, True)
    inputs[5] = np.array([SEQ, 3], np.int32)  # key lengths
    past_len = 3
    past = rng.standard_normal((2, BATCH, HEADS, past_len, HIDDEN // HEADS)).astype(np.float32)
    inputs[8] = past
    if unidirectional:
        inputs[5] = None
    node = _node(inputs, ["y", "present"], unidirectional=unidirectional)
    contrib_parity(node, _present(inputs))


def test_qattention_scale_attribute(contrib_parity: Any, rng: np.random.Generator) -> None:
    inputs = _inputs(rng, np.uint8, False, True)
    inputs[5] = np.array([4, 2], np.int32)
    contrib_parity(_node(inputs, ["y"], scale=0.1), _present(inputs))
