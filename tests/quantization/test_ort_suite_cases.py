"""The failure classes that onnxruntime's own quantization tests found in turnout.quantization
(issue 29, item 4; docs/quantization.md, "onnxruntime's own quantization tests"): each case
quantizes a small model built here with onnxruntime.quantization and with turnout's, with the
same options, and checks that the node types and counts agree and that the two quantized models
give the same outputs on onnxruntime.
"""

from __future__ import annotations

import collections
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import turnout.tools.quantization as tq
from turnout.graph import errors
from turnout.tools.quantization import static_quantize_runner

ort = pytest.importorskip("onnxruntime")
oq = pytest.importorskip("onnxruntime.quantization")


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, tuple[int, list[int]]],
    outputs: dict[str, tuple[int, list[int]]],
    inits: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    opset: int = 17,
) -> onnx.ModelProto:
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [h.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        list(inits),
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def _feeds(model: onnx.ModelProto, count: int = 3, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        feed = {}
        for i in model.graph.input:
            shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
            if i.type.tensor_type.elem_type == T.BOOL:
                feed[i.name] = rng.random(shape) > 0.5
            else:
                dtype = h.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
                feed[i.name] = rng.standard_normal(shape).astype(dtype)
        feeds.append(feed)
    return feeds


class _Reader(oq.CalibrationDataReader):  # type: ignore[misc]
    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def _counts(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in model.graph.node)


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def _both(model: onnx.ModelProto, **kw: Any) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(onnxruntime's, turnout's) quantize_static of `model` with the options `kw`."""
    feeds = _feeds(model)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "q.onnx"  # onnxruntime writes to a path
        given = onnx.ModelProto()
        given.CopyFrom(model)  # onnxruntime moves a large weight of the proto to external data
        oq.quantize_static(given, str(out), _Reader(feeds), **kw)
        theirs = onnx.load(str(out))
    return theirs, tq.quantize_static(model, None, feeds, **kw)


def _assert_alike(model: onnx.ModelProto, theirs: onnx.ModelProto, ours: onnx.ModelProto) -> None:
    assert _counts(ours) == _counts(theirs)
    for feed in _feeds(model, 2, seed=9):
        for a, b in zip(_run(theirs, feed), _run(ours, feed), strict=True):
            span = float(np.ptp(a)) or 1.0
            assert np.abs(a.astype(np.float64) - b).max() <= 0.02 * span


def _static_kw(**extra: Any) -> dict[str, Any]:
    return {
        "quant_format": oq.QuantFormat.QDQ,
        "activation_type": oq.QuantType.QUInt8,
        "weight_type": oq.QuantType.QInt8,
        **extra,
    }


# -- ConvTranspose and TopK in QDQ ----------------------------------------------------------


def _conv_transpose() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = nh.from_array(rng.standard_normal([3, 4, 2, 2]).astype(np.float32), "w")
    b = nh.from_array(rng.standard_normal([4]).astype(np.float32), "b")
    node = h.make_node("ConvTranspose", ["x", "w", "b"], ["y"], "ct", strides=[2, 2])
    return _model([node], {"x": (T.FLOAT, [1, 3, 5, 5])}, {"y": (T.FLOAT, [1, 4, 10, 10])}, [w, b])


@pytest.mark.parametrize("per_channel", [False, True])
def test_conv_transpose_is_a_weighted_op_with_output_channels_on_axis_1(per_channel: bool) -> None:
    model = _conv_transpose()
    theirs, ours = _both(model, **_static_kw(per_channel=per_channel))
    assert _counts(ours) == {"QuantizeLinear": 2, "DequantizeLinear": 4, "ConvTranspose": 1}
    _assert_alike(model, theirs, ours)
    weight_scale = next(t for t in ours.graph.initializer if t.name == "w_scale")
    assert list(weight_scale.dims) == ([4] if per_channel else [])


def test_topk_values_share_the_input_scale_when_forced() -> None:
    k = nh.from_array(np.array([3], np.int64), "k")
    node = h.make_node("TopK", ["x", "k"], ["v", "i"], "topk", axis=1)
    model = _model(
        [node], {"x": (T.FLOAT, [2, 10])}, {"v": (T.FLOAT, [2, 3]), "i": (T.INT64, [2, 3])}, [k]
    )
    for force in (False, True):
        kw = _static_kw(extra_options={"ForceQuantizeNoInputCheck": force})
        theirs, ours = _both(model, **kw)
        _assert_alike(model, theirs, ours)
    q = [n for n in ours.graph.node if n.op_type == "QuantizeLinear"]
    assert len(q) == 2 and q[0].input[1:] == q[1].input[1:]


def test_matmul_per_channel_axis_is_onnxruntimes_axis_1() -> None:
    w = nh.from_array(np.random.default_rng(1).random([2, 3, 7, 9]).astype(np.float32), "w")
    node = h.make_node("MatMul", ["x", "w"], ["y"], "mm")
    model = _model(
        [node], {"x": (T.FLOAT, [2, 3, 5, 7])}, {"y": (T.FLOAT, [2, 3, 5, 9])}, [w], opset=21
    )
    theirs, ours = _both(model, **_static_kw(per_channel=True))
    scales = [next(t for t in m.graph.initializer if t.name == "w_scale") for m in (theirs, ours)]
    assert list(scales[0].dims) == list(scales[1].dims) == [3]
    _assert_alike(model, theirs, ours)


# -- options onnxruntime's runner passes ------------------------------------------------------


def _conv_relu() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    w = nh.from_array(rng.standard_normal([4, 3, 3, 3]).astype(np.float32), "w")
    b = nh.from_array(rng.standard_normal([4]).astype(np.float32), "b")
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], "conv"), h.make_node("Relu", ["c"], ["y"])]
    return _model(
        nodes, {"x": (T.FLOAT, [1, 3, 8, 8])}, {"y": (T.FLOAT, [1, 4, 6, 6])}, [w, b], opset=21
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"QuantizeBias": False},
        {"UseQDQContribOps": True},
        {"CalibTensorRangeSymmetric": True},
    ],
    ids=lambda e: next(iter(e)),
)
def test_extra_options_of_the_runner_as_onnxruntime(extra: dict[str, Any]) -> None:
    model = _conv_relu()
    theirs, ours = _both(model, **_static_kw(extra_options=extra))
    _assert_alike(model, theirs, ours)
    domains = {(n.op_type, n.domain) for m in (theirs, ours) for n in m.graph.node}
    assert {d for op, d in domains if op == "QuantizeLinear"} == (
        {"com.microsoft"} if "UseQDQContribOps" in extra else {""}
    )


def test_symmetric_calibration_range_centres_the_activation_zero_point() -> None:
    model = _conv_relu()
    ours = tq.quantize_static(
        model, None, _feeds(model), **_static_kw(extra_options={"CalibTensorRangeSymmetric": True})
    )
    x_zero = next(t for t in ours.graph.initializer if t.name == "x_zero_point")
    assert int(nh.to_array(x_zero)) == 128


def test_int8_activations_with_uint8_weights_are_refused_as_onnxruntime(tmp_path: Path) -> None:
    model = _conv_relu()
    kw = {"activation_type": oq.QuantType.QInt8, "weight_type": oq.QuantType.QUInt8}
    with pytest.raises(ValueError, match="doesn't support data format"):
        oq.quantize_static(model, str(tmp_path / "q.onnx"), _Reader(_feeds(model)), **kw)
    with pytest.raises(ValueError, match="doesn't support data format"):
        tq.quantize_static(model, None, _feeds(model), **kw)


# -- static_quantize_runner --------------------------------------------------------------------


def _runner_folder(tmp: Path, model: onnx.ModelProto) -> Path:
    onnx.save(model, str(tmp / "model.onnx"))
    for index, feed in enumerate(_feeds(model, 2)):
        folder = tmp / f"test_data_set_{index}"
        folder.mkdir()
        for i, value in enumerate(feed.values()):
            (folder / f"input_{i}.pb").write_bytes(nh.from_array(value).SerializeToString())
    return tmp / "model.onnx"


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--per_channel", "--activation_type", "qint8", "--quant_format", "qoperator"],
        ["--disable_quantize_bias", "--calibration_method", "percentile"],
        ["--qdq_keep_removable_activations", "--nodes_to_exclude", "conv"],
    ],
    ids=["defaults", "qoperator", "no_bias", "keep_relu"],
)
def test_static_quantize_runner_writes_onnxruntimes_model(tmp_path: Path, args: list[str]) -> None:
    from onnxruntime.quantization import static_quantize_runner as ort_runner

    model = _conv_relu()
    source = _runner_folder(tmp_path, model)
    outputs: dict[str, onnx.ModelProto] = {}
    main: Callable[..., None]
    for who, main in (("ort", ort_runner.main), ("turnout", static_quantize_runner.main)):
        target = tmp_path / f"{who}.onnx"
        argv = ["-i", str(source), "-o", str(target), *args]
        if who == "ort":
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr("sys.argv", ["static_quantize_runner.py", *argv])
                main()
        else:
            main(argv)
        outputs[who] = onnx.load(str(target))
    _assert_alike(model, outputs["ort"], outputs["turnout"])


def test_static_quantize_runner_reads_each_test_data_set_as_one_feed(tmp_path: Path) -> None:
    model = _conv_relu()
    source = _runner_folder(tmp_path, model)
    reader = static_quantize_runner.OnnxModelCalibrationDataReader(source)
    feeds = [reader.get_next(), reader.get_next(), reader.get_next()]
    assert feeds[2] is None
    expected = _feeds(model, 2)
    for got, want in zip(feeds[:2], expected, strict=True):
        assert got is not None
        np.testing.assert_array_equal(got["x"], want["x"])


# -- Pad and Where ------------------------------------------------------------------------------


def _conv_pad(mode: str, value: float | None) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    inits = [
        nh.from_array(rng.standard_normal([4, 3, 3, 3]).astype(np.float32), "w"),
        nh.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "pads"),
    ]
    pad_inputs = ["c", "pads"]
    if value is not None:
        inits.append(nh.from_array(np.array(value, np.float32), "value"))
        pad_inputs.append("value")
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"], "conv"),
        h.make_node("Pad", pad_inputs, ["y"], "pad", mode=mode),
    ]
    y = {"y": (T.FLOAT, [1, 4, 9, 9])}
    return _model(nodes, {"x": (T.FLOAT, [1, 3, 8, 8])}, y, inits, opset=13)


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize(
    ("mode", "value"), [("constant", None), ("constant", 1.5), ("edge", None), ("reflect", None)]
)
def test_pad_after_a_quantized_op_as_onnxruntime(fmt: str, mode: str, value: float | None) -> None:
    model = _conv_pad(mode, value)
    theirs, ours = _both(model, **_static_kw(quant_format=getattr(oq.QuantFormat, fmt)))
    _assert_alike(model, theirs, ours)
    if fmt == "QOperator":  # Pad runs on the 8-bit values, its padding value quantized
        pad = next(n for n in ours.graph.node if n.op_type == "Pad")
        assert (
            pad.input[0] == next(n for n in ours.graph.node if n.op_type == "QLinearConv").output[0]
        )
        assert len(pad.input) == 3 and pad.input[2]


def test_pad_with_a_computed_padding_value_quantizes_it_in_qoperator_format() -> None:
    w = nh.from_array(
        np.random.default_rng(2).standard_normal([4, 3, 3, 3]).astype(np.float32), "w"
    )
    pads = nh.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"], "conv"),
        h.make_node("Pad", ["c", "pads", "v"], ["y"], "pad"),
    ]
    inputs = {"x": (T.FLOAT, [1, 3, 8, 8]), "v": (T.FLOAT, [1])}
    model = _model(nodes, inputs, {"y": (T.FLOAT, [1, 4, 8, 8])}, [w, pads], opset=13)
    theirs, ours = _both(model, **_static_kw(quant_format=oq.QuantFormat.QOperator))
    _assert_alike(model, theirs, ours)
    assert _counts(ours)["QuantizeLinear"] == 2  # x and the padding value


def _where() -> onnx.ModelProto:
    nodes = [
        h.make_node("Add", ["a", "b"], ["s"], "add"),
        h.make_node("Mul", ["a", "b"], ["p"], "mul"),
        h.make_node("Where", ["cond", "s", "p"], ["y"], "where"),
    ]
    inputs = {"cond": (T.BOOL, [2, 4]), "a": (T.FLOAT, [2, 4]), "b": (T.FLOAT, [2, 4])}
    return _model(nodes, inputs, {"y": (T.FLOAT, [2, 4])})


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("exclude", [[], ["add", "mul"]])
def test_where_as_onnxruntime(fmt: str, force: bool, exclude: list[str]) -> None:
    model = _where()
    kw = _static_kw(
        quant_format=getattr(oq.QuantFormat, fmt),
        nodes_to_exclude=exclude,
        extra_options={"ForceQuantizeNoInputCheck": force},
    )
    if fmt == "QOperator" and not exclude and not force:
        # onnxruntime's QOperator writer fails on this graph (its runner test expects the
        # error): turnout's model, Where left float, is checked against the float model on
        # the calibration feeds (other feeds fall outside the calibrated ranges)
        ours = tq.quantize_static(model, None, _feeds(model), **kw)
        assert "QLinearWhere" not in _counts(ours)
        for feed in _feeds(model):
            for a, b in zip(_run(model, feed), _run(ours, feed), strict=True):
                span = float(np.ptp(a)) or 1.0
                assert np.abs(a.astype(np.float64) - b).max() <= 0.02 * span
        return
    theirs, ours = _both(model, **kw)
    _assert_alike(model, theirs, ours)
    assert ("QLinearWhere" in _counts(ours)) == (fmt == "QOperator" and force)


# -- TensorQuantOverrides -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "encoding", [{"scale": 0.005, "zero_point": 2}, {"rmin": -0.5, "rmax": 3.0}], ids=str
)
def test_tensor_quant_overrides_set_an_activations_scale_and_zero_point(
    encoding: dict[str, float],
) -> None:
    model = _conv_relu()
    given = {
        k: np.array(v, np.int64 if k == "zero_point" else np.float32) for k, v in encoding.items()
    }
    kw = _static_kw(extra_options={"TensorQuantOverrides": {"x": [given]}})
    theirs, ours = _both(model, **kw)
    _assert_alike(model, theirs, ours)
    for name in ("x_scale", "x_zero_point"):
        values = [
            nh.to_array(next(t for t in m.graph.initializer if t.name == name))
            for m in (theirs, ours)
        ]
        np.testing.assert_allclose(values[1], values[0], rtol=1e-6)


def test_tensor_quant_overrides_turnout_does_not_implement_are_refused() -> None:
    model = _conv_relu()
    for overrides in (
        {"x": [{"scale": 0.1, "zero_point": 0, "symmetric": True}]},
        {"w": [{"rmin": 0, "rmax": 1}]},
    ):
        with pytest.raises(NotImplementedError, match="TensorQuantOverrides"):
            tq.quantize_static(
                model, None, _feeds(model), extra_options={"TensorQuantOverrides": overrides}
            )


# -- float16 models, and weight scales raised for int32 biases --------------------------------


def _conv_mlp(
    elem: int, opset: int = 19, bias: float = 1.0, w: float = 1.0, w2: float = 1.0
) -> onnx.ModelProto:
    """Conv(+bias) -> Relu -> MaxPool -> Reshape -> MatMul -> Add(constant) in `elem` (`bias`,
    `w`, `w2`: factors on the conv's bias and weight and on the MatMul's weight)."""
    rng = np.random.default_rng(5)
    dtype = h.tensor_dtype_to_np_dtype(elem)
    inits = [
        nh.from_array((rng.standard_normal([8, 3, 3, 3]) * w).astype(dtype), "w"),
        nh.from_array((rng.standard_normal(8) * bias).astype(dtype), "b"),
        nh.from_array(np.array([1, -1], np.int64), "shape"),
        nh.from_array((rng.standard_normal([8 * 36, 5]) * w2).astype(dtype), "w2"),
        nh.from_array(rng.standard_normal(5).astype(dtype), "b2"),
    ]
    nodes = [
        h.make_node("Conv", ["x", "w", "b"], ["c"], "conv", pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c"], ["r"], "relu"),
        h.make_node("MaxPool", ["r"], ["p"], "pool", kernel_shape=[1, 1]),
        h.make_node("Reshape", ["p", "shape"], ["f"], "reshape"),
        h.make_node("MatMul", ["f", "w2"], ["m"], "matmul"),
        h.make_node("Add", ["m", "b2"], ["y"], "add"),
    ]
    return _model(nodes, {"x": (elem, [1, 3, 6, 6])}, {"y": (elem, [1, 5])}, inits, opset)


def _scales(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: nh.to_array(t) for t in model.graph.initializer if t.name.endswith("_scale")}


@pytest.mark.parametrize("per_channel", [False, True])
def test_float16_model_is_quantized_with_float16_scales(per_channel: bool) -> None:
    model = _conv_mlp(T.FLOAT16)
    theirs, ours = _both(model, **_static_kw(per_channel=per_channel))
    _assert_alike(model, theirs, ours)
    mine, reference = _scales(ours), _scales(theirs)
    assert (
        {v.dtype for v in mine.values()}
        == {v.dtype for v in reference.values()}
        == {np.dtype(np.float16)}
    )
    for name in ("x_scale", "w_scale", "w2_scale"):  # weights and the graph input: exact
        np.testing.assert_array_equal(mine[name], reference[name])


def test_float16_model_in_qoperator_format_is_refused() -> None:
    # onnxruntime writes QLinearConv with float16 scales, which it then cannot load
    model = _conv_mlp(T.FLOAT16)
    kw = _static_kw(quant_format=oq.QuantFormat.QOperator)
    with pytest.raises(errors.NotImplemented, match="QOperator of a float16 model"):
        tq.quantize_static(model, None, _feeds(model), **kw)


def test_float16_model_below_opset_19_is_converted_to_opset_19() -> None:
    model = _conv_mlp(T.FLOAT16, opset=13)
    ours = tq.quantize_static(model, None, _feeds(model), **_static_kw())
    assert ours.opset_import[0].version == 19  # float16 scales need QuantizeLinear-19
    _run(ours, _feeds(model, 1)[0])  # onnxruntime loads it (its own quantizer's fails to)


@pytest.mark.parametrize("elem", [T.FLOAT, T.FLOAT16])
@pytest.mark.parametrize("per_channel", [False, True])
def test_weight_scale_is_raised_for_a_bias_beyond_int32(elem: int, per_channel: bool) -> None:
    model = _conv_mlp(elem, bias=1e6 if elem == T.FLOAT else 1e4, w=1e-4, w2=1e-4)
    theirs, ours = _both(model, **_static_kw(per_channel=per_channel))
    mine, reference = _scales(ours), _scales(theirs)
    np.testing.assert_array_equal(mine["w_scale"], reference["w_scale"])
    _assert_alike(model, theirs, ours)


def test_float16_bias_scale_that_underflows_is_dequantized_in_float32_and_cast() -> None:
    model = _conv_mlp(T.FLOAT16, bias=1e4, w=1e-3, w2=1e-4)
    kw = _static_kw(extra_options={"QDQDisableWeightAdjustForInt32Bias": True})
    theirs, ours = _both(model, **kw)
    assert _counts(ours)["Cast"] == _counts(theirs)["Cast"] == 1
    _assert_alike(model, theirs, ours)


# -- AddQDQPairToWeight and DedicatedQDQPair ---------------------------------------------------


def _shared_activation(r_is_output: bool = True) -> onnx.ModelProto:
    """Relu's output r read by two Convs and a Sigmoid (all quantized), and kept as a graph
    output when `r_is_output`; an Add with a constant input."""
    rng = np.random.default_rng(2)
    inits = [
        nh.from_array(rng.standard_normal([4, 3, 3, 3]).astype(np.float32), "w"),
        nh.from_array(rng.standard_normal([4]).astype(np.float32), "b"),
        nh.from_array(rng.standard_normal([4, 3, 3, 3]).astype(np.float32), "w2"),
        nh.from_array(rng.standard_normal([4, 6, 6]).astype(np.float32), "c"),
    ]
    nodes = [
        h.make_node("Relu", ["x"], ["r"], "relu"),
        h.make_node("Conv", ["r", "w", "b"], ["y1"], "conv1", pads=[1, 1, 1, 1]),
        h.make_node("Conv", ["r", "w2"], ["y2"], "conv2", pads=[1, 1, 1, 1]),
        h.make_node("Add", ["y1", "c"], ["a"], "add"),
        h.make_node("Mul", ["a", "y2"], ["y"], "mul"),
        h.make_node("Sigmoid", ["r"], ["s"], "sigmoid"),
    ]
    outputs = {"y": (T.FLOAT, [1, 4, 6, 6]), "s": (T.FLOAT, [1, 3, 6, 6])}
    if r_is_output:
        outputs["r"] = (T.FLOAT, [1, 3, 6, 6])
    return _model(nodes, {"x": (T.FLOAT, [1, 3, 6, 6])}, outputs, inits)


def _readers(model: onnx.ModelProto, name: str) -> list[str]:
    return sorted(n.op_type for n in model.graph.node if name in n.input)


@pytest.mark.parametrize("per_channel", [False, True])
def test_add_qdq_pair_to_weight_keeps_float_weights_behind_quantize_linear(
    per_channel: bool,
) -> None:
    model = _shared_activation()
    kw = _static_kw(per_channel=per_channel, extra_options={"AddQDQPairToWeight": True})
    theirs, ours = _both(model, **kw)
    _assert_alike(model, theirs, ours)
    for m in (theirs, ours):  # the float weights stay, each read by a QuantizeLinear
        assert all(_readers(m, name) == ["QuantizeLinear"] for name in ("w", "w2", "c"))
    names = {t.name for t in ours.graph.initializer}
    assert names == {t.name for t in theirs.graph.initializer} - {
        "b_quantized_scale",
        "b_quantized_zero_point",
    } | {"b_scale", "b_zero_point"}


def test_dedicated_qdq_pair_gives_each_quantized_reader_its_own_pair() -> None:
    model = _shared_activation()
    theirs, ours = _both(model, **_static_kw(extra_options={"DedicatedQDQPair": True}))
    _assert_alike(model, theirs, ours)
    for m in (theirs, ours):
        q = [n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "r"]
        assert len(q) == 3  # conv1, conv2 and sigmoid read r through their own pair
        assert [o.name for o in m.graph.output if o.name == "r"] == ["r"]


def test_qdq_options_are_ignored_in_qoperator_format() -> None:
    model = _shared_activation(r_is_output=False)
    options = {"DedicatedQDQPair": True, "AddQDQPairToWeight": True}
    kw = _static_kw(quant_format=oq.QuantFormat.QOperator, extra_options=options)
    theirs, ours = _both(model, **kw)
    _assert_alike(model, theirs, ours)


@pytest.mark.parametrize("reduce_range", [False, True])
def test_constant_input_of_an_elementwise_op_is_stored_in_the_activation_type(
    reduce_range: bool,
) -> None:
    model = _conv_mlp(T.FLOAT)  # the Add's constant b2
    theirs, ours = _both(model, **_static_kw(reduce_range=reduce_range))
    _assert_alike(model, theirs, ours)
    for name in ("b2_quantized", "b2_scale", "b2_zero_point"):
        mine, reference = (
            next(nh.to_array(t) for t in m.graph.initializer if t.name == name)
            for m in (ours, theirs)
        )
        assert mine.dtype == reference.dtype
        np.testing.assert_array_equal(mine, reference)
