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
from onnx import helper

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


def _hugging_face_mask(model: onnx.ModelProto) -> onnx.ModelProto:
    """bert_like with its additive mask built as Hugging Face's BERT builds it (Unsqueeze,
    Unsqueeze, Cast, Sub, Mul), a path onnxruntime's attention fusion recognizes; bert_like
    casts first and unsqueezes last, which it does not."""
    g = model.graph
    first = {}
    for n in g.node:
        first.setdefault(n.op_type, n)
    cast, sub, mul, unsqueeze = (first[op] for op in ("Cast", "Sub", "Mul", "Unsqueeze"))
    assert list(cast.input) == ["attention_mask"] and sub.input[1] == cast.output[0]
    g.initializer.extend(
        helper.make_tensor(f"axis_{i}", onnx.TensorProto.INT64, [1], [i]) for i in (1, 2)
    )
    mask = [
        helper.make_node("Unsqueeze", ["attention_mask", "axis_1"], ["mask_1"]),
        helper.make_node("Unsqueeze", ["mask_1", "axis_2"], ["mask_2"]),
        helper.make_node("Cast", ["mask_2"], ["mask_f"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Sub", [sub.input[0], "mask_f"], ["mask_inv"]),
        helper.make_node("Mul", ["mask_inv", mul.input[1]], [unsqueeze.output[0]]),
    ]
    rest = [n for n in g.node if n not in (cast, sub, mul, unsqueeze)]
    del g.node[:]
    g.node.extend(mask + rest)
    return model


def test_bert_with_fused_attention(tmp_path: Path, rng: np.random.Generator) -> None:
    model = _hugging_face_mask(bert_like(layers=2, hidden=HIDDEN, heads=HEADS, seq=SEQ))
    optimized = _optimize(model, tmp_path)
    ops = _ops(optimized)
    assert ops[(DOMAIN, "Attention")] == 2  # with a 1-D mask index (ReduceSum of the mask)
    assert ops[(DOMAIN, "SkipLayerNormalization")] == 4
    assert ops[(DOMAIN, "BiasGelu")] == 2
    for batch, seq in ((BATCH, SEQ), (1, 7)):  # dynamic batch and sequence
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq // 2 :] = 0
        x = rng.standard_normal((batch, seq, HIDDEN)).astype(np.float32)
        _compare(optimized, {"x": x, "attention_mask": mask})
