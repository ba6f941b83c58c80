"""End to end: models that onnxruntime's quantization tools write (and its optimizer fuses),
from turnout's benchmark models, run on turnout as on onnxruntime.

- `quantize_static(..., QuantFormat.QOperator)`: QLinearConv, QLinearMatMul, QLinearAdd,
  QLinearGlobalAveragePool, QGemm, and (on a small model of those ops) QLinearSigmoid,
  QLinearLeakyRelu, QLinearConcat, QLinearAveragePool, QLinearMul, QLinearSoftmax; outputs
  within 2% of the output range.
  At onnxruntime's highest level, its NHWC transformer rewrites the convolutions into
  com.microsoft QLinearConv with `channels_last` (its NCHWc layout ops left off).
- `MatMulNBitsQuantizer` (4 bits, block 32, symmetric and asymmetric): MatMulNBits, also with
  the bias onnxruntime's optimizer folds into it; within 0.1% (2% at accuracy level 4, where
  onnxruntime quantizes the activations too).
- `quantize_dynamic`, then onnxruntime's optimizer (which fuses MatMulInteger and its scaling
  into DynamicQuantizeMatMul and MatMulIntegerToFloat): within 2%.
- `quantize_dynamic` on com.microsoft Attention (QAttention), EmbedLayerNormalization
  (QEmbedLayerNormalization) and on LSTM (DynamicQuantizeLSTM): within 2%. (bert_like's own
  attention is no pattern onnxruntime's optimizer fuses into Attention, so small models
  written as it writes them stand in.)

Each test prints its max |difference| / output range (`pytest -s` shows them).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.contrib import DOMAIN
from turnout_testbed import zoo

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of these checks")


def _tools() -> Any:
    try:
        from onnxruntime import quantization
    except Exception as e:  # a build without its quantization tools
        pytest.skip(f"onnxruntime.quantization does not import: {e}")
    return quantization


def _ops(model: onnx.ModelProto) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node)


def _feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float inputs of the model's (static) shapes; an attention mask of ones."""
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [d.dim_value or 1 for d in tt.shape.dim]
        if tt.elem_type == onnx.TensorProto.FLOAT:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            out[vi.name] = np.ones(shape, helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return out


def _ort_session(model: onnx.ModelProto | str, **options: Any) -> Any:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    for k, v in options.items():
        setattr(so, k, v)
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _parity(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tol: float) -> float:
    """max |turnout - onnxruntime| / onnxruntime's output range, over every output; asserts
    it is within `tol`."""
    want = _ort_session(model).run(None, feeds)
    got = turnout.InferenceSession(model.SerializeToString()).run(None, feeds)
    worst = 0.0
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        span = float(w.max() - w.min()) or 1.0
        worst = max(worst, float(np.abs(g.astype(np.float64) - w).max()) / span)
    print(f"max |diff| / range = {worst:.2e}")
    assert worst <= tol
    return worst


class _Calibration:
    """A CalibrationDataReader of a few random batches."""

    def __init__(self, model: onnx.ModelProto, rng: np.random.Generator, batches: int = 4):
        self._data: Iterator[dict[str, np.ndarray]] = iter(
            [_feeds(model, rng) for _ in range(batches)]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._data, None)

    def rewind(self) -> None:  # onnxruntime's reader interface
        pass


STATIC_MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, int]]] = {
    "resnet18_like": (
        lambda: zoo.resnet18_like(size=32),
        {"QLinearConv": 20, "QLinearAdd": 8, "QLinearGlobalAveragePool": 1, "QGemm": 1},
    ),
    "mlp": (lambda: zoo.mlp(batch=4), {"QLinearMatMul": 3, "QLinearAdd": 3}),
}


@pytest.mark.parametrize("name", [pytest.param("resnet18_like", marks=pytest.mark.slow), "mlp"])
def test_quantize_static_qoperator(name: str, tmp_path: Path, rng: np.random.Generator) -> None:
    q = _tools()
    make, expected = STATIC_MODELS[name]
    model = make()
    onnx.save(model, tmp_path / "float.onnx")
    q.quantize_static(
        str(tmp_path / "float.onnx"),
        str(tmp_path / "q.onnx"),
        _Calibration(model, rng),
        quant_format=q.QuantFormat.QOperator,
    )
    quantized = onnx.load(tmp_path / "q.onnx")
    ops = {op: n for (_, op), n in _ops(quantized).items()}
    assert {op: ops.get(op, 0) for op in expected} == expected
    _parity(quantized, _feeds(model, rng), 0.02)


def _elementwise_model() -> onnx.ModelProto:
    """Sigmoid and LeakyRelu of one input, concatenated, pooled, multiplied, added, softmaxed:
    each an op the QOperator format writes as its com.microsoft QLinear form."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["a"]),
        helper.make_node("LeakyRelu", ["x"], ["b"], alpha=0.1),
        helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
        helper.make_node("AveragePool", ["c"], ["d"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Mul", ["d", "d"], ["e"]),
        helper.make_node("Add", ["e", "d"], ["f"]),
        helper.make_node("Softmax", ["f"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "elementwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_quantize_static_qoperator_elementwise(tmp_path: Path, rng: np.random.Generator) -> None:
    q = _tools()
    model = _elementwise_model()
    onnx.save(model, tmp_path / "float.onnx")
    q.quantize_static(
        str(tmp_path / "float.onnx"),
        str(tmp_path / "q.onnx"),
        _Calibration(model, rng),
        quant_format=q.QuantFormat.QOperator,
    )
    quantized = onnx.load(tmp_path / "q.onnx")
    ops = _ops(quantized)
    for op in ("Sigmoid", "LeakyRelu", "Concat", "AveragePool", "Mul", "Add", "Softmax"):
        assert ops[(DOMAIN, f"QLinear{op}")] == 1, op
    _parity(quantized, _feeds(model, rng), 0.02)


def _nbits(model: onnx.ModelProto, symmetric: bool, accuracy_level: int | None) -> onnx.ModelProto:
    _tools()
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    except Exception as e:  # it needs onnx_ir
        pytest.skip(f"onnxruntime's MatMulNBitsQuantizer does not import: {e}")
    quantizer = MatMulNBitsQuantizer(
        model, bits=4, block_size=32, is_symmetric=symmetric, accuracy_level=accuracy_level
    )
    quantizer.process()
    out: onnx.ModelProto = quantizer.model.model
    return out


def _ort_optimized(
    model: onnx.ModelProto, tmp_path: Path, level: str = "ORT_ENABLE_EXTENDED", **kwargs: Any
) -> onnx.ModelProto:
    """The model as onnxruntime's optimizer leaves it at `level` (its fusions saved)."""
    path = tmp_path / "ort_optimized.onnx"
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    so.optimized_model_filepath = str(path)
    ort.InferenceSession(model.SerializeToString(), so, ["CPUExecutionProvider"], **kwargs)
    return onnx.load(path)


NBITS_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": lambda: zoo.mlp(batch=4),
    "bert_like": lambda: zoo.bert_like(layers=1, hidden=64, heads=4, seq=16, batch=2),
}


@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "asymmetric"])
@pytest.mark.parametrize("name", sorted(NBITS_MODELS))
def test_matmul_nbits_quantizer(
    name: str, symmetric: bool, tmp_path: Path, rng: np.random.Generator
) -> None:
    model = NBITS_MODELS[name]()
    feeds = _feeds(model, rng)
    quantized = _nbits(model, symmetric, None)
    assert _ops(quantized)[(DOMAIN, "MatMulNBits")] >= 3
    _parity(quantized, feeds, 1e-3)
    if name == "mlp":  # onnxruntime's optimizer folds each bias Add into MatMulNBits
        fused = _ort_optimized(quantized, tmp_path)
        with_bias = [n for n in fused.graph.node if n.op_type == "MatMulNBits" and len(n.input) > 5]
        assert len(with_bias) == 3
        _parity(fused, feeds, 1e-3)


def test_matmul_nbits_accuracy_level_4(rng: np.random.Generator) -> None:
    model = zoo.mlp(batch=4)
    feeds = _feeds(model, rng)
    _parity(_nbits(model, False, 4), feeds, 0.02)


@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
@pytest.mark.parametrize("name", ["mlp", "bert_like"])
def test_quantize_dynamic_fused_by_onnxruntime(
    name: str, weight_type: str, tmp_path: Path, rng: np.random.Generator
) -> None:
    q = _tools()
    model = NBITS_MODELS[name]()
    feeds = _feeds(model, rng)
    onnx.save(model, tmp_path / "float.onnx")
    q.quantize_dynamic(
        str(tmp_path / "float.onnx"),
        str(tmp_path / "q.onnx"),
        weight_type=getattr(q.QuantType, weight_type),
        extra_options={"MatMulConstBOnly": True},
    )
    # FusedMatMul (attention's scaled Q K^T) is no quantized op: that fusion stays off
    fused = _ort_optimized(
        onnx.load(tmp_path / "q.onnx"), tmp_path, disabled_optimizers=["MatMulScaleFusion"]
    )
    ops = _ops(fused)
    assert ops[(DOMAIN, "DynamicQuantizeMatMul")] >= 3
    if name == "bert_like":  # Q, K and V share one quantized input
        assert ops[(DOMAIN, "MatMulIntegerToFloat")] == 3
    _parity(fused, feeds, 0.02)


def _attention_model(rng: np.random.Generator, hidden: int = 32, heads: int = 4) -> onnx.ModelProto:
    """An encoder step as onnxruntime's transformer optimizer writes it: com.microsoft
    Attention (with a key-length mask index) and a residual Add."""
    w = (rng.standard_normal((hidden, 3 * hidden)) * 0.2).astype(np.float32)
    b = (rng.standard_normal(3 * hidden) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node(
            "Attention", ["x", "w", "b", "lengths"], ["ctx"], domain=DOMAIN, num_heads=heads
        ),
        helper.make_node("Add", ["ctx", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "attention",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden]),
            helper.make_tensor_value_info("lengths", TensorProto.INT32, ["batch"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _embedded_attention_model(rng: np.random.Generator, hidden: int = 32) -> onnx.ModelProto:
    """BERT's front as onnxruntime's transformer optimizer writes it: EmbedLayerNormalization
    (whose mask index feeds Attention), then Attention."""
    tables = {
        "word": rng.standard_normal((50, hidden)),
        "position": rng.standard_normal((16, hidden)),
        "segment": rng.standard_normal((2, hidden)),
        "gamma": 1 + rng.standard_normal(hidden) * 0.1,
        "beta": rng.standard_normal(hidden) * 0.1,
        "w": rng.standard_normal((hidden, 3 * hidden)) * 0.2,
        "b": rng.standard_normal(3 * hidden) * 0.1,
    }
    nodes = [
        helper.make_node(
            "EmbedLayerNormalization",
            ["ids", "segments", "word", "position", "segment", "gamma", "beta", "mask"],
            ["embedded", "mask_index"],
            domain=DOMAIN,
            epsilon=1e-12,
        ),
        helper.make_node(
            "Attention", ["embedded", "w", "b", "mask_index"], ["y"], domain=DOMAIN, num_heads=4
        ),
    ]
    ints = [
        helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", "seq"])
        for n in ("ids", "segments", "mask")
    ]
    graph = helper.make_graph(
        nodes,
        "embedded_attention",
        ints,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in tables.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _lstm_model(rng: np.random.Generator, size: int = 16, hidden: int = 24) -> onnx.ModelProto:
    """A bidirectional LSTM over [seq, batch, size] inputs."""
    weights = {
        "W": rng.standard_normal((2, 4 * hidden, size)) * 0.3,
        "R": rng.standard_normal((2, 4 * hidden, hidden)) * 0.3,
        "B": rng.standard_normal((2, 8 * hidden)) * 0.1,
    }
    node = helper.make_node(
        "LSTM", ["x", "W", "R", "B"], ["y", "y_h"], hidden_size=hidden, direction="bidirectional"
    )
    graph = helper.make_graph(
        [node],
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 3, size])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("y_h", TensorProto.FLOAT, None),
        ],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.onnxruntime_exact_8bit
def test_quantize_dynamic_attention(tmp_path: Path, rng: np.random.Generator) -> None:
    """quantize_dynamic turns com.microsoft Attention into QAttention (its input quantized by
    a DynamicQuantizeLinear)."""
    q = _tools()
    model = _attention_model(rng)
    onnx.save(model, tmp_path / "float.onnx")
    q.quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"))
    quantized = onnx.load(tmp_path / "q.onnx")
    assert _ops(quantized)[(DOMAIN, "QAttention")] == 1
    x = rng.standard_normal((2, 6, 32)).astype(np.float32)
    _parity(quantized, {"x": x, "lengths": np.array([6, 4], np.int32)}, 0.02)


def test_quantize_dynamic_embedding_and_attention(tmp_path: Path, rng: np.random.Generator) -> None:
    """quantize_dynamic turns EmbedLayerNormalization into QEmbedLayerNormalization and
    Attention into QAttention."""
    q = _tools()
    model = _embedded_attention_model(rng)
    onnx.save(model, tmp_path / "float.onnx")
    q.quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"))
    quantized = onnx.load(tmp_path / "q.onnx")
    ops = _ops(quantized)
    assert ops[(DOMAIN, "QEmbedLayerNormalization")] == ops[(DOMAIN, "QAttention")] == 1
    mask = np.ones((2, 9), np.int32)
    mask[1, 5:] = 0
    feeds = {
        "ids": rng.integers(0, 50, (2, 9)).astype(np.int32),
        "segments": rng.integers(0, 2, (2, 9)).astype(np.int32),
        "mask": mask,
    }
    _parity(quantized, feeds, 0.02)


@pytest.mark.onnxruntime_exact_8bit
def test_quantize_dynamic_lstm(tmp_path: Path, rng: np.random.Generator) -> None:
    """quantize_dynamic turns LSTM into DynamicQuantizeLSTM. Both round X and the hidden state
    to uint8, but onnxruntime rounds each of its threads' part of the batch on its own range
    (and its activations are approximations, which can move a rounding): within 2%."""
    q = _tools()
    model = _lstm_model(rng)
    onnx.save(model, tmp_path / "float.onnx")
    q.quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"))
    quantized = onnx.load(tmp_path / "q.onnx")
    assert _ops(quantized)[(DOMAIN, "DynamicQuantizeLSTM")] == 1
    _parity(quantized, _feeds(model, rng), 0.02)


@pytest.mark.parametrize(
    ("weight_type", "options"),
    [("QInt4", {}), ("QInt8", {"UseQDQContribOps": True})],
    ids=["int4_weights", "UseQDQContribOps"],
)
def test_quantize_static_qdq_contrib(
    weight_type: str, options: dict[str, Any], tmp_path: Path, rng: np.random.Generator
) -> None:
    """The QDQ format writes com.microsoft QuantizeLinear/DequantizeLinear for 4-bit weights
    below opset 21, and when asked to."""
    q = _tools()
    model = zoo.mlp(batch=4)
    onnx.save(model, tmp_path / "float.onnx")
    q.quantize_static(
        str(tmp_path / "float.onnx"),
        str(tmp_path / "q.onnx"),
        _Calibration(model, rng),
        quant_format=q.QuantFormat.QDQ,
        weight_type=getattr(q.QuantType, weight_type),
        extra_options=options,
    )
    quantized = onnx.load(tmp_path / "q.onnx")
    ops = _ops(quantized)
    assert ops[(DOMAIN, "QuantizeLinear")] and ops[(DOMAIN, "DequantizeLinear")]
    assert not ops[("ai.onnx", "QuantizeLinear")]
    _parity(quantized, _feeds(model, rng), 0.02)


@pytest.mark.slow
def test_qoperator_nhwc_from_onnxruntime_optimizer(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    q = _tools()
    model = zoo.resnet18_like(size=32)
    onnx.save(model, tmp_path / "float.onnx")
    q.quantize_static(
        str(tmp_path / "float.onnx"),
        str(tmp_path / "q.onnx"),
        _Calibration(model, rng),
        quant_format=q.QuantFormat.QOperator,
    )
    nhwc = _ort_optimized(
        onnx.load(tmp_path / "q.onnx"),
        tmp_path,
        "ORT_ENABLE_ALL",
        disabled_optimizers=["NchwcTransformer"],  # its layout ops are no com.microsoft ops
    )
    last = [
        n
        for n in nhwc.graph.node
        if n.op_type == "QLinearConv"
        and n.domain == DOMAIN
        and any(a.name == "channels_last" and a.i == 1 for a in n.attribute)
    ]
    assert len(last) == 20
    _parity(nhwc, _feeds(model, rng), 0.02)
