"""turnout.tools.quantization as onnxruntime.quantization (issue 29, item 4): on a conv net, an
MLP and an attention block built here, quantize_static (QDQ and QOperator) and quantize_dynamic
with the same options give onnxruntime's node types and counts, and the models run alike on both
runtimes; 16-bit and float8 types round-trip; onnxruntime's module layout imports under the
drop-in."""

from __future__ import annotations

import collections
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import turnout
import turnout.tools.quantization as tq

ort = pytest.importorskip("onnxruntime")
oq = pytest.importorskip("onnxruntime.quantization")


def _init(name: str, shape: list[int], seed: int, scale: float = 0.3) -> onnx.TensorProto:
    values = np.random.default_rng(seed).standard_normal(shape) * scale
    return nh.from_array(values.astype(np.float32), name)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], x: list[int], y: list[int]):
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, x)],
        [h.make_tensor_value_info("y", T.FLOAT, y)],
        inits,
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def conv_net() -> onnx.ModelProto:
    n = h.make_node
    return _model(
        [
            n("Conv", ["x", "w1", "b1"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
            n("Relu", ["c1"], ["r1"], "relu1"),
            n("MaxPool", ["r1"], ["p1"], "pool1", kernel_shape=[2, 2], strides=[2, 2]),
            n("Conv", ["p1", "w2", "b2"], ["c2"], "conv2", pads=[1, 1, 1, 1]),
            n("Relu", ["c2"], ["r2"], "relu2"),
            n("Add", ["r2", "skip"], ["a2"], "add"),
            n("AveragePool", ["a2"], ["ap"], "avgpool", kernel_shape=[2, 2], strides=[2, 2]),
            n("GlobalAveragePool", ["ap"], ["g"], "gap"),
            n("Flatten", ["g"], ["f"], "flatten"),
            n("Gemm", ["f", "wf", "bf"], ["y"], "fc", transB=1),
        ],
        [
            _init("w1", [8, 3, 3, 3], 1),
            _init("b1", [8], 2, 0.1),
            _init("w2", [8, 8, 3, 3], 3),
            _init("b2", [8], 4, 0.1),
            _init("skip", [1, 8, 4, 4], 7),
            _init("wf", [10, 8], 5),
            _init("bf", [10], 6, 0.1),
        ],
        [1, 3, 8, 8],
        [1, 10],
    )


def mlp() -> onnx.ModelProto:
    n = h.make_node
    return _model(
        [
            n("MatMul", ["x", "w1"], ["m1"], "mm1"),
            n("Add", ["m1", "b1"], ["a1"], "add1"),
            n("Relu", ["a1"], ["r1"], "relu1"),
            n("MatMul", ["r1", "w2"], ["m2"], "mm2"),
            n("Add", ["m2", "b2"], ["a2"], "add2"),
            n("Sigmoid", ["a2"], ["s2"], "sig"),
            n("Mul", ["a2", "s2"], ["y"], "mul"),
        ],
        [
            _init("w1", [16, 32], 1),
            _init("b1", [32], 2, 0.1),
            _init("w2", [32, 8], 3),
            _init("b2", [8], 4, 0.1),
        ],
        [4, 16],
        [4, 8],
    )


def attention() -> onnx.ModelProto:
    n, d = h.make_node, 16
    return _model(
        [
            n("MatMul", ["x", "wq"], ["q"], "mm_q"),
            n("MatMul", ["x", "wk"], ["k"], "mm_k"),
            n("MatMul", ["x", "wv"], ["v"], "mm_v"),
            n("Transpose", ["k"], ["kt"], "kt", perm=[0, 2, 1]),
            n("MatMul", ["q", "kt"], ["s"], "mm_s"),
            n("Mul", ["s", "scale"], ["ss"], "scale_mul"),
            n("Softmax", ["ss"], ["p"], "softmax", axis=-1),
            n("MatMul", ["p", "v"], ["o"], "mm_o"),
            n("MatMul", ["o", "wo"], ["o2"], "mm_proj"),
            n("Add", ["o2", "bo"], ["o3"], "add_bias"),
            n("Add", ["o3", "x"], ["res"], "add_res"),
            n("Concat", ["res", "x"], ["cat"], "concat", axis=-1),
            n("MatMul", ["cat", "wf"], ["y"], "mm_f"),
        ],
        [_init(w, [d, d], i) for i, w in enumerate(("wq", "wk", "wv", "wo"), 1)]
        + [_init("bo", [d], 5, 0.1), nh.from_array(np.array(0.25, np.float32), "scale")]
        + [_init("wf", [2 * d, d], 6)],
        [1, 6, d],
        [1, 6, d],
    )


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "conv_net": conv_net,
    "mlp": mlp,
    "attention": attention,
}


def _feeds(model: onnx.ModelProto, n: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


class _Reader(oq.CalibrationDataReader):  # type: ignore[misc]
    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.it = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.it, None)


def _counts(model: onnx.ModelProto) -> dict[str, int]:
    return dict(collections.Counter(n.op_type for n in model.graph.node))


def _run_both(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    data = model.SerializeToString()
    on_ort = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    on_turnout = turnout.InferenceSession(data).run(None, feed)[0]
    return on_ort, on_turnout


def _same_graph_and_outputs(theirs: onnx.ModelProto, ours: onnx.ModelProto) -> None:
    assert _counts(ours) == _counts(theirs)
    feed = _feeds(ours, 1, seed=99)[0]
    on_ort, on_turnout = _run_both(ours, feed)
    span = float(np.ptp(on_ort)) or 1.0
    # a quantized network is discontinuous: a value on a rounding tie may take the other level
    # on the other runtime; onnxruntime's own QDQ vs fused runs differ by up to ~2% of the range
    assert np.abs(on_ort - on_turnout).max() <= 0.02 * span


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_quantize_static_gives_onnxruntimes_graph(name: str, fmt: str, tmp_path) -> None:
    model = MODELS[name]()
    onnx.save(model, tmp_path / "f.onnx")
    options = {
        "activation_type": oq.QuantType.QUInt8,
        "weight_type": oq.QuantType.QInt8,
        "quant_format": getattr(oq.QuantFormat, fmt),
    }
    oq.quantize_static(tmp_path / "f.onnx", tmp_path / "o.onnx", _Reader(_feeds(model)), **options)
    ours = tq.quantize_static(model, tmp_path / "t.onnx", _Reader(_feeds(model)), **options)
    _same_graph_and_outputs(onnx.load(tmp_path / "o.onnx"), ours)


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("name", sorted(MODELS))
def test_quantize_dynamic_gives_onnxruntimes_graph(name: str, tmp_path) -> None:
    model = MODELS[name]()
    onnx.save(model, tmp_path / "f.onnx")
    oq.quantize_dynamic(tmp_path / "f.onnx", tmp_path / "o.onnx", weight_type=oq.QuantType.QInt8)
    ours = tq.quantize_dynamic(model, None, weight_type=oq.QuantType.QInt8)
    _same_graph_and_outputs(onnx.load(tmp_path / "o.onnx"), ours)


@pytest.mark.onnxruntime_exact_8bit
def test_dynamic_matmul_of_two_activations(tmp_path) -> None:
    """MatMulConstBOnly=False: the attention block's score and context MatMuls are quantized
    too, both inputs at run time, as onnxruntime writes them."""
    model = attention()
    onnx.save(model, tmp_path / "f.onnx")
    options = {"MatMulConstBOnly": False}
    oq.quantize_dynamic(tmp_path / "f.onnx", tmp_path / "o.onnx", extra_options=options)
    ours = tq.quantize_dynamic(model, None, extra_options=options)
    theirs = onnx.load(tmp_path / "o.onnx")
    assert _counts(ours) == _counts(theirs)
    assert (
        _counts(ours)["MatMulInteger"] > _counts(tq.quantize_dynamic(model, None))["MatMulInteger"]
    )
    _same_graph_and_outputs(theirs, ours)


@pytest.mark.parametrize(
    ("activation", "weight", "method"),
    [
        ("QUInt16", "QInt8", "MinMax"),
        ("QInt16", "QInt16", "MinMax"),
        ("QFLOAT8E4M3FN", "QFLOAT8E4M3FN", "Distribution"),
    ],
)
def test_16_bit_and_float8_round_trip(activation: str, weight: str, method: str, tmp_path) -> None:
    model = mlp()
    onnx.save(model, tmp_path / "f.onnx")
    options = {
        "activation_type": getattr(oq.QuantType, activation),
        "weight_type": getattr(oq.QuantType, weight),
        "calibrate_method": getattr(oq.CalibrationMethod, method),
    }
    oq.quantize_static(tmp_path / "f.onnx", tmp_path / "o.onnx", _Reader(_feeds(model)), **options)
    theirs = onnx.load(tmp_path / "o.onnx")
    ours = tq.quantize_static(model, None, _feeds(model), **options)
    assert _counts(ours) == _counts(theirs)
    assert ours.opset_import[0].version == theirs.opset_import[0].version  # 21, or 19 for float8
    qtype = getattr(tq.QuantType, activation).tensor_type
    q_types = {t.data_type for t in ours.graph.initializer if t.name.endswith("_zero_point")}
    assert qtype in q_types
    feed = _feeds(model, 1, seed=5)[0]
    on_ort, on_turnout = _run_both(ours, feed)
    np.testing.assert_allclose(on_turnout, on_ort, atol=0.02 * float(np.ptp(on_ort)))


def test_nothing_to_quantize_and_absent_names_are_what_onnxruntime_does(caplog) -> None:
    model = mlp()
    with caplog.at_level("WARNING", logger="turnout.tools.quantization"):
        same = tq.quantize_static(model, None, _feeds(model), op_types_to_quantize=["Resize"])
        quant = tq.quantize_static(model, None, _feeds(model), nodes_to_exclude=["no_such_node"])
    assert same.graph.node == model.graph.node
    assert "no_such_node" in caplog.text
    assert "QuantizeLinear" in _counts(quant)


@pytest.mark.parametrize(
    "options",
    [
        {"MatMulConstBOnly": True, "MinimumRealRange": 1e-4},
        {"QDQKeepRemovableActivations": True},
    ],
)
def test_extra_options_onnxruntime_accepts(options: dict, tmp_path) -> None:
    model = attention() if "MatMulConstBOnly" in options else conv_net()
    onnx.save(model, tmp_path / "f.onnx")
    oq.quantize_static(
        tmp_path / "f.onnx",
        tmp_path / "o.onnx",
        _Reader(_feeds(model)),
        activation_type=oq.QuantType.QUInt8,
        extra_options=options,
    )
    ours = tq.quantize_static(model, None, _feeds(model), extra_options=options)
    assert _counts(ours) == _counts(onnx.load(tmp_path / "o.onnx"))


def test_calibrator_config_and_qdq_quantizer_names(tmp_path) -> None:
    from turnout.tools.quantization.calibrate import create_calibrator
    from turnout.tools.quantization.qdq_quantizer import QDQQuantizer

    model = mlp()
    calibrator = create_calibrator(model, None, calibrate_method=tq.CalibrationMethod.MinMax)
    calibrator.collect_data(_Reader(_feeds(model)))
    ranges = calibrator.compute_data()
    assert "m1" in ranges and ranges["m1"].range_value[0] < 0
    quant = QDQQuantizer(
        model, False, False, tq.QuantType.QInt8, tq.QuantType.QUInt8, ranges, [], [], []
    ).quantize_model()
    assert _counts(quant) == _counts(tq.quantize_static(model, None, _feeds(model)))
    config = tq.get_qdq_config(
        model, _Reader(_feeds(model)), nodes_to_exclude=lambda m, n: n.name == "mul"
    )
    tq.quantize(model, tmp_path / "q.onnx", config)
    assert "Mul" in [
        n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node if n.name == "mul"
    ]
    tq.quantize(model, tmp_path / "d.onnx", tq.DynamicQuantConfig())
    assert "MatMulInteger" in _counts(onnx.load(tmp_path / "d.onnx"))


def test_qdq_quantizer_takes_onnx_element_types_and_refuses_missing_ranges() -> None:
    """onnxruntime's quantize_static hands QDQQuantizer TensorProto element types; a range
    missing for a quantized node's tensor is onnxruntime's ValueError, not a KeyError."""
    from onnxruntime.quantization.calibrate import TensorData

    from turnout.tools.quantization.qdq_quantizer import QDQQuantizer

    model = _model([h.make_node("MatMul", ["x", "w"], ["y"], "mm")], [_init("w", [4, 3], 1)],
                   [2, 4], [2, 3])  # fmt: skip
    lo_hi = {"x": (-1.0, 1.0), "y": (-4.0, 4.0)}
    ranges = {
        k: TensorData(lowest=np.float32(a), highest=np.float32(b)) for k, (a, b) in lo_hi.items()
    }
    args = (False, False, T.INT8, T.UINT8)
    for quantizer in (oq.qdq_quantizer.QDQQuantizer, QDQQuantizer):
        quantized = quantizer(model, *args, ranges, [], [], ["MatMul"], {}).quantize_model()
        assert _counts(quantized) == {"MatMul": 1, "QuantizeLinear": 2, "DequantizeLinear": 3}
        without_y = quantizer(model, *args, {"x": ranges["x"]}, [], [], ["MatMul"], {})
        with pytest.raises(
            ValueError, match="Quantization parameters are not specified for param y"
        ):
            without_y.quantize_model()


def test_configs_take_onnxruntimes_arguments_positionally() -> None:
    import inspect

    for name in ("StaticQuantConfig", "DynamicQuantConfig"):
        ours, theirs = getattr(tq, name), getattr(oq, name)
        assert list(inspect.signature(ours).parameters) == list(
            inspect.signature(theirs).parameters
        )
    config = tq.StaticQuantConfig("reader", tq.CalibrationMethod.Entropy, tq.QuantFormat.QOperator)
    assert (config.calibrate_method, config.quant_format) == (
        tq.CalibrationMethod.Entropy,
        tq.QuantFormat.QOperator,
    )
    assert config.activation_type == tq.QuantType.QInt8 and config.nodes_to_exclude == []
    dynamic = tq.DynamicQuantConfig(tq.QuantType.QUInt8, ["MatMul"], per_channel=True)
    assert dynamic.op_types_to_quantize == ["MatMul"] and dynamic.per_channel
    assert dynamic.activation_type == tq.QuantType.QUInt8 and dynamic.extra_options == {}


def test_module_layout_imports_under_the_drop_in() -> None:
    script = """
import turnout
turnout.install_as_onnxruntime()
import onnxruntime.quantization as q
from onnxruntime.quantization import (QuantFormat, QuantType, StaticQuantConfig,
    DynamicQuantConfig, get_qdq_config, quantize, QDQQuantizer, create_calibrator)
from onnxruntime.quantization.quant_utils import compute_scale_zp, get_qmin_qmax_for_qType
from onnxruntime.quantization.onnx_model import ONNXModel
from onnxruntime.quantization.calibrate import CalibrationMethod, CalibrationDataReader
from onnxruntime.quantization.qdq_quantizer import QDQQuantizer as Q2
from onnxruntime.quantization.shape_inference import quant_pre_process
import turnout.tools.quantization as tq
assert q is tq and QuantType.QUInt16.value == 4 and QuantType.QFLOAT8E4M3FN.value == 2
assert Q2 is QDQQuantizer
"""
    subprocess.run([sys.executable, "-c", script], check=True)
