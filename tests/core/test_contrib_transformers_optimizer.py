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
from onnx import helper, numpy_helper

import turnout
from turnout.graph.contrib import DOMAIN
from turnout_testbed.zoo import bert_like

HEADS, HIDDEN, SEQ, BATCH = 4, 64, 16, 2


def _optimize(model: onnx.ModelProto, tmp_path: Path) -> onnx.ModelProto:
    try:
        from onnxruntime.transformers.optimizer import optimize_model
    except Exception as e:  # an onnxruntime build without its transformers tools
        pytest.skip(f"onnxruntime.transformers.optimizer does not import: {e}")
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    # opt_level 0: the Python fusions only (they emit the contrib ops); levels >= 1 first run
    # onnxruntime's own graph optimizer, which imports torch, and CI has no torch
    optimized: Any = optimize_model(
        str(path), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN, opt_level=0
    )
    proto: onnx.ModelProto = optimized.model
    if any(n.domain == DOMAIN for n in proto.graph.node) and all(
        o.domain != DOMAIN for o in proto.opset_import
    ):  # at level 0 the optimizer leaves the contrib opset undeclared
        proto.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    return proto


def _ops(model: onnx.ModelProto) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node)


def _compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    import onnxruntime as ort

    # the optimizer may make integer inputs int32 (EmbedLayerNormalization's ids)
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    feeds = {
        k: v.astype(np.int32) if types[k] == onnx.TensorProto.INT32 else v for k, v in feeds.items()
    }
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


VOCAB, MAX_POSITION = 50, 32


def _with_embeddings(model: onnx.ModelProto, rng: np.random.Generator) -> onnx.ModelProto:
    """`model` (whose input `x` is [B, S, hidden] embeddings) fed by BERT's embedding layer:
    word, token-type and position tables gathered by input_ids, token_type_ids and position
    ids sliced to the sequence length, summed, in the layout onnxruntime's
    EmbedLayerNormalization fusion recognizes."""
    g = model.graph

    def table(name: str, rows: int) -> None:
        g.initializer.append(
            numpy_helper.from_array(
                (rng.standard_normal((rows, HIDDEN)) * 0.5).astype(np.float32), name
            )
        )

    table("word_table", VOCAB)
    table("position_table", MAX_POSITION)
    table("segment_table", 2)
    g.initializer.extend(
        [
            numpy_helper.from_array(np.arange(MAX_POSITION, dtype=np.int64)[None], "positions"),
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.array([0], np.int64), "zero_1d"),
            numpy_helper.from_array(np.array([1], np.int64), "one_1d"),
        ]
    )
    embeddings = [
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "one"], ["seq_len"], axis=0),
        helper.make_node("Unsqueeze", ["seq_len", "zero_1d"], ["seq_len_1d"]),
        helper.make_node(
            "Slice", ["positions", "zero_1d", "seq_len_1d", "one_1d", "one_1d"], ["position_ids"]
        ),
        helper.make_node("Gather", ["word_table", "input_ids"], ["word"]),
        helper.make_node("Gather", ["segment_table", "token_type_ids"], ["segment"]),
        helper.make_node("Gather", ["position_table", "position_ids"], ["position"]),
        helper.make_node("Add", ["word", "segment"], ["word_segment"]),
        helper.make_node("Add", ["word_segment", "position"], ["x"]),
    ]
    x = next(i for i in g.input if i.name == "x")
    g.input.remove(x)
    g.input.extend(
        helper.make_tensor_value_info(name, onnx.TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "token_type_ids")
    )
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(embeddings + nodes)
    return model


def test_bert_with_embeddings(tmp_path: Path, rng: np.random.Generator) -> None:
    model = _hugging_face_mask(bert_like(layers=2, hidden=HIDDEN, heads=HEADS, seq=SEQ))
    optimized = _optimize(_with_embeddings(model, rng), tmp_path)
    ops = _ops(optimized)
    assert ops[(DOMAIN, "EmbedLayerNormalization")] == 1  # its mask_index feeds Attention
    assert ops[(DOMAIN, "Attention")] == 2
    assert ops[(DOMAIN, "SkipLayerNormalization")] == 4
    for batch, seq in ((BATCH, SEQ), (1, 7)):
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq // 2 :] = 0
        feeds = {
            "input_ids": rng.integers(0, VOCAB, (batch, seq)),
            "token_type_ids": rng.integers(0, 2, (batch, seq)),
            "attention_mask": mask,
        }
        _compare(optimized, feeds)
