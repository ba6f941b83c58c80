"""quantize_static (QDQ): ranges calibrated on turnout, Q/DQ placed as onnxruntime places them,
the same outputs on turnout and onnxruntime, and calibration data errors that name the input."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import turnout
from turnout.graph.errors import InvalidArgument
from turnout.tools.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

Batches = Callable[..., list[dict[str, np.ndarray]]]


class ListReader(CalibrationDataReader):
    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.feeds: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _quantize_node_of(model: onnx.ModelProto, tensor: str) -> onnx.NodeProto:
    """The QuantizeLinear of `tensor` (of its renamed producer output when it is a graph output)."""
    return next(
        n
        for n in model.graph.node
        if n.op_type == "QuantizeLinear"
        and n.input[0] in (tensor, f"{tensor}_QuantizeLinear_Input")
    )


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray], runtime: str) -> np.ndarray:
    if runtime == "turnout":
        return turnout.InferenceSession(model.SerializeToString()).run(None, feed)[0]
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the parity oracle")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


@pytest.mark.parametrize(
    "method", [CalibrationMethod.MinMax, CalibrationMethod.Percentile, CalibrationMethod.Entropy]
)
@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("name", ["tiny_cnn", "classifier"])
def test_output_runs_the_same_on_turnout_and_onnxruntime(
    request: pytest.FixtureRequest,
    make_batches: Batches,
    name: str,
    per_channel: bool,
    method: CalibrationMethod,
) -> None:
    model = request.getfixturevalue(name)
    quant = quantize_static(
        model,
        None,
        ListReader(make_batches(model, 4)),
        per_channel=per_channel,
        calibrate_method=method,
    )
    onnx.checker.check_model(quant, full_check=True)
    feed = make_batches(model, 1, seed=99)[0]
    ref = _run(model, feed, "turnout")
    ours, theirs = _run(quant, feed, "turnout"), _run(quant, feed, "onnxruntime")
    span = ref.max() - ref.min()
    assert np.abs(ours - theirs).max() < 0.02 * span
    assert np.abs(ours - ref).max() < 0.1 * span


def test_ranges_are_the_float_models_min_and_max(
    tiny_cnn: onnx.ModelProto, make_batches: Batches
) -> None:
    feeds = make_batches(tiny_cnn, 3)
    quant = quantize_static(tiny_cnn, None, feeds)  # a plain list of feeds works too
    inits = _inits(quant)
    reference = ReferenceEvaluator(tiny_cnn)
    for tensor in ("image", "c1", "r2"):
        values = np.concatenate([reference.run([tensor], f)[0].ravel() for f in feeds])
        lo, hi = min(values.min(), 0.0), max(values.max(), 0.0)
        node = _quantize_node_of(quant, tensor)
        scale, zero = inits[node.input[1]], inits[node.input[2]]
        assert zero.dtype == np.uint8
        np.testing.assert_allclose(scale, (hi - lo) / 255, rtol=1e-5)
        assert int(zero) == round(-lo / ((hi - lo) / 255))


def test_relu_is_folded_into_its_producers_range(
    tiny_cnn: onnx.ModelProto, make_batches: Batches
) -> None:
    quant = quantize_static(tiny_cnn, None, ListReader(make_batches(tiny_cnn, 2)))
    ops = [n.op_type for n in quant.graph.node]
    assert "Relu" not in ops
    producer = next(n for n in quant.graph.node if "r2" in n.output)
    assert producer.op_type == "Conv"  # conv2 now writes relu2's output ...
    assert int(_inits(quant)[_quantize_node_of(quant, "r2").input[2]]) == 0  # ... clipped at 0


def test_pass_through_ops_reuse_their_inputs_scale(
    tiny_cnn: onnx.ModelProto, make_batches: Batches
) -> None:
    quant = quantize_static(tiny_cnn, None, ListReader(make_batches(tiny_cnn, 2)))
    inits = _inits(quant)
    for x, y in (("r1", "p1"), ("r2", "p2"), ("p2", "flat")):
        qx, qy = _quantize_node_of(quant, x), _quantize_node_of(quant, y)
        assert inits[qx.input[1]] == inits[qy.input[1]]
        assert inits[qx.input[2]] == inits[qy.input[2]]


@pytest.mark.parametrize("per_channel", [False, True])
def test_weights_int8_and_bias_int32_at_the_product_scale(
    tiny_cnn: onnx.ModelProto, make_batches: Batches, per_channel: bool
) -> None:
    quant = quantize_static(
        tiny_cnn, None, ListReader(make_batches(tiny_cnn, 2)), per_channel=per_channel
    )
    inits = _inits(quant)
    producers = {o: n for n in quant.graph.node for o in n.output}
    axes = {"conv2": 0, "fc": 1}  # Conv W [M, C, kh, kw]; Gemm B [K, N] with transB=0
    for node in quant.graph.node:
        if node.name not in axes:
            continue
        x_dq, w_dq, b_dq = (producers[i] for i in node.input)
        x_scale = inits[x_dq.input[1]]
        w_q, w_scale = inits[w_dq.input[0]], inits[w_dq.input[1]]
        b_q, b_scale = inits[b_dq.input[0]], inits[b_dq.input[1]]
        assert w_q.dtype == np.int8 and b_q.dtype == np.int32
        np.testing.assert_allclose(b_scale, x_scale * w_scale, rtol=1e-6)
        axis = {a.name: a.i for a in w_dq.attribute}.get("axis")
        if per_channel:
            assert axis == axes[node.name] and w_scale.shape == (w_q.shape[axis],)
            assert {a.name: a.i for a in b_dq.attribute}.get("axis") == 0
        else:
            assert w_scale.shape == ()


def test_graph_outputs_keep_their_names(classifier: onnx.ModelProto, make_batches: Batches) -> None:
    quant = quantize_static(classifier, None, ListReader(make_batches(classifier, 2)))
    assert [o.name for o in quant.graph.output] == ["y"]
    assert next(n for n in quant.graph.node if "y" in n.output).op_type == "DequantizeLinear"


def test_int8_activations(tiny_cnn: onnx.ModelProto, make_batches: Batches) -> None:
    quant = quantize_static(
        tiny_cnn, None, ListReader(make_batches(tiny_cnn, 2)), activation_type=QuantType.QInt8
    )
    zero = _inits(quant)[_quantize_node_of(quant, "r1").input[2]]
    assert zero.dtype == np.int8 and int(zero) == -128  # relu's range [0, max] on int8


def _input_scale(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], **kw: object) -> float:
    quant = quantize_static(model, None, list(feeds), **kw)  # type: ignore[arg-type]
    return float(_inits(quant)[_quantize_node_of(quant, "x").input[1]])


def test_percentile_ignores_an_outlier(classifier: onnx.ModelProto, make_batches: Batches) -> None:
    feeds = make_batches(classifier, 4, batch=64)
    feeds[2]["x"][0, 0] = 1000.0
    minmax = _input_scale(classifier, feeds, calibrate_method=CalibrationMethod.MinMax)
    assert minmax == pytest.approx(1000 / 255, rel=0.01)
    percentile = _input_scale(
        classifier,
        feeds,
        calibrate_method=CalibrationMethod.Percentile,
        extra_options={"CalibPercentile": 99.9},
    )
    assert percentile < minmax / 50


def test_entropy_clips_a_long_tail(classifier: onnx.ModelProto, rng: np.random.Generator) -> None:
    feeds = [{"x": rng.laplace(size=(64, 16)).astype(np.float32)} for _ in range(4)]
    minmax = _input_scale(classifier, feeds, calibrate_method=CalibrationMethod.MinMax)
    entropy = _input_scale(classifier, feeds, calibrate_method=CalibrationMethod.Entropy)
    assert minmax / 3 < entropy < minmax * 0.95


def test_a_reader_with_a_wrong_name_is_named(
    tiny_cnn: onnx.ModelProto, make_batches: Batches
) -> None:
    feeds = make_batches(tiny_cnn, 2)
    feeds[1] = {"img": feeds[1]["image"]}
    with pytest.raises(InvalidArgument, match=r"batch 1: unknown input name\(s\) \['img'\]"):
        quantize_static(tiny_cnn, None, ListReader(feeds))


def test_a_reader_with_a_wrong_shape_is_named(
    tiny_cnn: onnx.ModelProto, make_batches: Batches
) -> None:
    feeds = make_batches(tiny_cnn, 2)
    feeds[0]["image"] = feeds[0]["image"][:, :, :14]
    with pytest.raises(InvalidArgument, match=r"(?s)batch 0.*image"):
        quantize_static(tiny_cnn, None, ListReader(feeds))


def test_an_empty_reader_is_an_error(tiny_cnn: onnx.ModelProto) -> None:
    with pytest.raises(InvalidArgument, match="gave no data"):
        quantize_static(tiny_cnn, None, ListReader([]))


def test_an_onnxruntime_reader_and_enums_work(
    classifier: onnx.ModelProto, make_batches: Batches
) -> None:
    ort_quant = pytest.importorskip("onnxruntime.quantization", reason="checks its reader class")
    feeds = iter(make_batches(classifier, 2))

    class Reader(ort_quant.CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(feeds, None)

    quant = quantize_static(
        classifier,
        None,
        Reader(),
        quant_format=ort_quant.QuantFormat.QDQ,
        activation_type=ort_quant.QuantType.QUInt8,
        calibrate_method=ort_quant.CalibrationMethod.MinMax,
    )
    assert "QuantizeLinear" in [n.op_type for n in quant.graph.node]


def test_unsupported_requests_are_refused(
    tiny_cnn: onnx.ModelProto, make_batches: Batches, caplog: pytest.LogCaptureFixture
) -> None:
    feeds = make_batches(tiny_cnn, 1)
    with caplog.at_level("WARNING", logger="turnout.tools.quantization"):
        quant = quantize_static(tiny_cnn, None, feeds, op_types_to_quantize=["Resize"])
    assert quant.graph.node == tiny_cnn.graph.node  # written unchanged, as onnxruntime does
    assert "no node" in caplog.text
    with pytest.raises(InvalidArgument, match="calibrate_method"):
        quantize_static(tiny_cnn, None, feeds, calibrate_method="Bogus")  # type: ignore[arg-type]


def test_a_shared_weight_is_quantized_once(rng: np.random.Generator) -> None:
    from onnx import TensorProto, helper

    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["a"], "mm0"),
            helper.make_node("MatMul", ["a", "w"], ["y"], "mm1"),
        ],
        "shared_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = [{"x": rng.standard_normal((3, 8)).astype(np.float32)}]
    for per_channel in (False, True):
        quant = quantize_static(model, None, feeds, per_channel=per_channel)
        weights = [t for t in quant.graph.initializer if list(t.dims) == [8, 8]]
        assert [t.data_type for t in weights] == [TensorProto.INT8]  # one int8 copy, no float
        readers = [n for n in quant.graph.node if n.op_type == "MatMul"]
        assert readers[0].input[1] == readers[1].input[1]
    dynamic = quantize_dynamic(model, None, per_channel=True)
    assert [list(t.dims) for t in dynamic.graph.initializer].count([8, 8]) == 1


@pytest.mark.onnxruntime_exact_8bit
def test_clip_is_folded_into_its_producers_range(rng: np.random.Generator) -> None:
    from onnx import TensorProto, helper

    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 3, "w0"),
        numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w1"),
        numpy_helper.from_array(np.float32(0.0), "lo"),
        numpy_helper.from_array(np.float32(6.0), "hi"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w0"], ["a"], "mm0"),
            helper.make_node("Clip", ["a", "lo", "hi"], ["c"], "relu6"),
            helper.make_node("MatMul", ["c", "w1"], ["y"], "mm1"),
        ],
        "clip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = [{"x": rng.standard_normal((16, 8)).astype(np.float32)} for _ in range(3)]
    quant = quantize_static(model, None, feeds)
    assert "Clip" not in [n.op_type for n in quant.graph.node]
    q = _quantize_node_of(quant, "c")
    scale, zero = _inits(quant)[q.input[1]], _inits(quant)[q.input[2]]
    assert int(zero) == 0 and scale == pytest.approx(6.0 / 255, rel=1e-6)  # [0, 6] exactly
    feed = feeds[0]
    ref = _run(model, feed, "turnout")
    ours, theirs = _run(quant, feed, "turnout"), _run(quant, feed, "onnxruntime")
    span = ref.max() - ref.min()
    assert np.abs(ours - theirs).max() < 0.02 * span
    assert np.abs(ours - ref).max() < 0.05 * span
