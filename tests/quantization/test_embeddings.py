"""Constant Gather tables (embeddings) are stored as 8 bits by both quantizers, as
onnxruntime.quantization stores them (dynamic: int8 weight; static: the activation type)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import turnout
from turnout.tools.quantization import quantize_dynamic, quantize_static

TextCNN = tuple[onnx.ModelProto, Callable[[int], dict[str, np.ndarray]]]


def _table_type(model: onnx.ModelProto) -> int:
    gather = next(n for n in model.graph.node if n.op_type == "Gather")
    inits = {t.name: t for t in model.graph.initializer}
    if gather.input[0] in inits:
        return inits[gather.input[0]].data_type
    dq = next(n for n in model.graph.node if gather.input[0] in n.output)
    assert dq.op_type == "DequantizeLinear"
    return inits[dq.input[0]].data_type


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_embedding_table_is_int8_and_outputs_agree(text_cnn: TextCNN, mode: str) -> None:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the parity oracle")
    model, feeds = text_cnn
    if mode == "dynamic":
        quant = quantize_dynamic(model, None)
    else:
        quant = quantize_static(model, None, [feeds(s) for s in range(3)])
    assert _table_type(model) == TensorProto.FLOAT
    assert _table_type(quant) == (TensorProto.INT8 if mode == "dynamic" else TensorProto.UINT8)
    if mode == "static":  # the rows picked keep the table's scale: a runtime gathers 8 bits
        gather = next(n for n in quant.graph.node if n.op_type == "Gather")
        dq = next(n for n in quant.graph.node if gather.input[0] in n.output)
        q = next(
            n
            for n in quant.graph.node
            if n.op_type == "QuantizeLinear" and gather.output[0] in n.input
        )
        assert q.input[1:] == dq.input[1:]
    table = next(n for n in model.graph.node if n.op_type == "Gather").input[0]
    assert table not in {t.name for t in quant.graph.initializer}  # the float table is gone
    feed = feeds(42)
    ref = turnout.InferenceSession(model.SerializeToString()).run(None, feed)[0]
    ours = turnout.InferenceSession(quant.SerializeToString()).run(None, feed)[0]
    session = ort.InferenceSession(quant.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, feed)[0]
    span = ref.max() - ref.min()
    assert np.abs(ours - theirs).max() < 0.02 * span
    assert np.abs(ours - ref).max() < 0.2 * span
