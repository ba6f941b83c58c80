"""DynamicQuantizeLSTM on turnout-numba (int32 products of the 8-bit codes) against turnout's
numpy kernel, which follows onnxruntime step by step (tests/core/test_contrib_quantized_rnn.py
and tests/quantization hold it to onnxruntime): the integer sums are exact on both, so every
output must be the same bits. Directions, int8 and uint8 weights, zero points per direction and
per column, rows not a multiple of 4, more rows than float32 holds exactly (the numpy kernel's
float64 path), bias, initial state, sequence lengths and peepholes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from turnout.graph.contrib import DOMAIN
from turnout.tools.testing import cpu_session, provider_session

Array = np.ndarray[Any, Any]


def _codes(rng: np.random.Generator, dt: Any, shape: tuple[int, ...], per_column: bool) -> Any:
    """Random codes of `dt` with scales and zero points per direction or per column (uint8
    zero points anywhere in range, so the zero-point correction is exercised)."""
    info = np.iinfo(dt)
    q = rng.integers(info.min, info.max, shape, endpoint=True).astype(dt)
    pshape = (shape[0], shape[2]) if per_column else (shape[0],)
    scale = rng.uniform(0.002, 0.02, pshape).astype(np.float32)
    zp = (
        np.zeros(pshape, dt)
        if dt == np.int8
        else rng.integers(0, 256, pshape, endpoint=False).astype(dt)
    )
    return q, scale, zp


def _model(inputs: list[Array | None], direction: str, hidden: int) -> onnx.ModelProto:
    """One DynamicQuantizeLSTM node: X fed, the rest initializers, all three outputs."""
    names = ["" if v is None else f"i{i}" for i, v in enumerate(inputs)]
    node = helper.make_node(
        "DynamicQuantizeLSTM", names, ["y", "y_h", "y_c"], domain=DOMAIN,
        hidden_size=hidden, direction=direction, name="qlstm",
    )  # fmt: skip
    x = inputs[0]
    assert x is not None
    fl = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("i0", fl, list(x.shape))],
        [helper.make_tensor_value_info(o, fl, None) for o in ("y", "y_h", "y_c")],
        [numpy_helper.from_array(v, f"i{i}") for i, v in enumerate(inputs) if i and v is not None],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _same_bits(model: onnx.ModelProto, x: Array) -> None:
    sess: Any = provider_session(model, "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    got = sess.run(None, {"i0": x})
    want = cpu_session(model).run(None, {"i0": x})
    for name, g, w in zip(("y", "y_h", "y_c"), got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        assert g.tobytes() == w.tobytes(), f"{name} differs: max {np.abs(g - w).max()}"


@pytest.mark.parametrize("per_column", [True, False])
@pytest.mark.parametrize("dt", [np.int8, np.uint8])
@pytest.mark.parametrize(
    "direction, steps, batch, inputs, hidden",
    [
        ("forward", 5, 3, 10, 8),
        ("reverse", 4, 2, 7, 9),  # rows not a multiple of 4
        ("bidirectional", 6, 1, 300, 64),  # 300 rows: the numpy kernel's float64 X product
        ("bidirectional", 3, 2, 33, 260),  # R of 260 rows: its float64 step product
    ],
)
def test_the_numba_products_give_the_numpy_kernels_bits(
    direction: str, steps: int, batch: int, inputs: int, hidden: int, dt: Any, per_column: bool
) -> None:
    rng = np.random.default_rng(inputs * hidden + steps)
    dirs = 2 if direction == "bidirectional" else 1
    w, ws, wz = _codes(rng, dt, (dirs, inputs, 4 * hidden), per_column)
    r, rs, rz = _codes(rng, dt, (dirs, hidden, 4 * hidden), per_column)
    x = rng.standard_normal((steps, batch, inputs)).astype(np.float32)
    b = (rng.standard_normal((dirs, 8 * hidden)) * 0.1).astype(np.float32)
    model = _model([x, w, r, b, None, None, None, None, ws, wz, rs, rz], direction, hidden)
    _same_bits(model, x)


def test_state_lengths_and_peepholes_give_the_numpy_kernels_bits() -> None:
    rng = np.random.default_rng(7)
    steps, batch, inputs, hidden = 6, 3, 12, 16
    w, ws, wz = _codes(rng, np.uint8, (2, inputs, 4 * hidden), True)
    r, rs, rz = _codes(rng, np.uint8, (2, hidden, 4 * hidden), False)
    x = rng.standard_normal((steps, batch, inputs)).astype(np.float32)
    b = (rng.standard_normal((2, 8 * hidden)) * 0.1).astype(np.float32)
    lens = np.array([6, 0, 3], np.int32)
    h0 = rng.standard_normal((2, batch, hidden)).astype(np.float32)
    c0 = rng.standard_normal((2, batch, hidden)).astype(np.float32)
    p = (rng.standard_normal((2, 3 * hidden)) * 0.1).astype(np.float32)
    model = _model([x, w, r, b, lens, h0, c0, p, ws, wz, rs, rz], "bidirectional", hidden)
    _same_bits(model, x)
