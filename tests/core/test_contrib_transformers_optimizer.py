"""End to end: onnxruntime's transformer optimizer rewrites turnout's BERT-like encoder into
com.microsoft ops; turnout loads the result and runs it as onnxruntime does (within 0.1% of
the output range)."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import turnout
from turnout.contrib import DOMAIN
from turnout.models.zoo import bert_like

HEADS, HIDDEN, SEQ, BATCH = 4, 64, 16, 2


def _optimize(model: onnx.ModelProto, tmp_path: Path) -> onnx.ModelProto:
    try:
        from onnxruntime.transformers.optimizer import optimize_model
    except Exception as e:  # an onnxruntime build without its transformers tools
        pytest.skip(f"onnxruntime.transformers.optimizer does not import: {e}")
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    optimized: Any = optimize_model(
        str(path), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN
    )
    proto: onnx.ModelProto = optimized.model
    return proto


def _ops(model: onnx.ModelProto) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node)


def _compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    import onnxruntime as ort

    data = model.SerializeToString()
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = turnout.InferenceSession(data).run(None, feeds)
    for w, g in zip(want, got, strict=True):
        span = float(w.max() - w.min())
        assert g.shape == w.shape and g.dtype == w.dtype
        assert float(np.abs(g - w).max()) <= 1e-3 * span


def test_bert_like_optimized_by_onnxruntime(tmp_path: Path, rng: np.random.Generator) -> None:
    optimized = _optimize(
        bert_like(layers=2, hidden=HIDDEN, heads=HEADS, seq=SEQ, batch=BATCH), tmp_path
    )
    ops = _ops(optimized)
    # what onnxruntime 1.32 fuses in this encoder (its attention pattern is not one it fuses)
    assert ops[(DOMAIN, "SkipLayerNormalization")] == 4
    assert ops[(DOMAIN, "BiasGelu")] == 2
    assert ops[("ai.onnx", "LayerNormalization")] == 1  # onnxruntime's opset-1 contrib form
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[1, SEQ // 2 :] = 0
    x = rng.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)
    _compare(optimized, {"x": x, "attention_mask": mask})
