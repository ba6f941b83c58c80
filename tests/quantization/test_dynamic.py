"""quantize_dynamic: standard integer ops, int8 weights, and the same outputs on turnout and on
onnxruntime (within 2% of the output's range)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.errors import NoSuchFile
from turnout.graph.errors import NotImplemented as TurnoutNotImplemented
from turnout.tools.quantization import QuantType, quantize_dynamic

STANDARD = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "Cast", "Mul", "Add"}


def _run_turnout(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    return turnout.InferenceSession(model.SerializeToString()).run(None, feed)[0]


def _run_ort(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the parity oracle")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def _gap(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(a - b).max() / (ref.max() - ref.min()))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("weight_type", [QuantType.QInt8, QuantType.QUInt8])
@pytest.mark.parametrize("name", ["tiny_cnn", "classifier"])
def test_output_runs_the_same_on_turnout_and_onnxruntime(
    request: pytest.FixtureRequest,
    make_batches: Callable[..., list[dict[str, np.ndarray]]],
    name: str,
    per_channel: bool,
    weight_type: QuantType,
) -> None:
    model = request.getfixturevalue(name)
    quant = quantize_dynamic(model, None, per_channel=per_channel, weight_type=weight_type)
    onnx.checker.check_model(quant, full_check=True)
    feed = make_batches(model, 1, seed=7)[0]
    ref = _run_turnout(model, feed)
    ours, theirs = _run_turnout(quant, feed), _run_ort(quant, feed)
    assert _gap(ours, theirs, ref) < 0.02
    assert _gap(ours, ref, ref) < 0.05  # and it still computes the float model's function


def test_weighted_ops_become_integer_ops_with_int8_weights(tiny_cnn: onnx.ModelProto) -> None:
    quant = quantize_dynamic(tiny_cnn, None)
    ops = [n.op_type for n in quant.graph.node]
    assert ops.count("ConvInteger") == 2 and ops.count("MatMulInteger") == 1
    assert "Conv" not in ops and "Gemm" not in ops
    inits = {t.name: t for t in quant.graph.initializer}
    assert not {"w1", "w2", "fc_w"} & set(inits)  # float weights are gone
    for node in quant.graph.node:
        if node.op_type in ("ConvInteger", "MatMulInteger"):
            assert inits[node.input[1]].data_type == TensorProto.INT8
            assert not numpy_helper.to_array(inits[node.input[3]]).any()  # symmetric: zp 0
    assert quant.ByteSize() < tiny_cnn.ByteSize() / 2


def test_one_dynamic_quantize_per_activation(rng: np.random.Generator) -> None:
    w = [
        numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), f"w{i}")
        for i in range(2)
    ]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w0"], ["a"], "mm0"),
            helper.make_node("MatMul", ["x", "w1"], ["b"], "mm1"),
            helper.make_node("Add", ["a", "b"], ["y"], "add"),
        ],
        "shared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        w,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    quant = quantize_dynamic(model, None)
    assert [n.op_type for n in quant.graph.node].count("DynamicQuantizeLinear") == 1


def test_per_channel_scales_run_along_output_channels(tiny_cnn: onnx.ModelProto) -> None:
    quant = quantize_dynamic(tiny_cnn, None, per_channel=True)
    inits = {t.name: numpy_helper.to_array(t) for t in quant.graph.initializer}
    float_w = {t.name: numpy_helper.to_array(t) for t in tiny_cnn.graph.initializer}
    shapes = {}
    for node in quant.graph.node:
        if node.op_type in ("ConvInteger", "MatMulInteger"):
            shapes[node.op_type] = inits[node.input[1]].shape
    assert shapes == {"ConvInteger": (16, 8, 3, 3), "MatMulInteger": (784, 10)}
    # weight scales: one per output channel, each fitting its own channel
    scale = next(
        v for k, v in inits.items() if k.startswith("conv2") and k.endswith("weight_scale")
    )
    assert scale.shape == (16, 1, 1)
    w_q = next(v for k, v in inits.items() if k.startswith("w2_quantized"))
    back = w_q.astype(np.float32) * scale.reshape(16, 1, 1, 1)
    assert np.abs(back - float_w["w2"]).max() <= scale.max() / 2 + 1e-7
    fc_scale = next(
        v for k, v in inits.items() if k.startswith("fc") and k.endswith("weight_scale")
    )
    assert fc_scale.shape == (10,)


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_folds_alpha_beta_and_transposes_b(
    rng: np.random.Generator, gemm: Callable[..., onnx.ModelProto], trans_b: int
) -> None:
    model = gemm(rng, 0.5, 2.0, trans_b)
    quant = quantize_dynamic(model, None, per_channel=True)
    assert "Gemm" not in [n.op_type for n in quant.graph.node]
    feed = {"x": rng.standard_normal((4, 12)).astype(np.float32)}
    ref = _run_turnout(model, feed)
    ours = _run_turnout(quant, feed)
    assert _gap(ours, ref, ref) < 0.03
    assert _gap(ours, _run_ort(quant, feed), ref) < 0.02


def test_paths_and_model_protos(tmp_path: Path, tiny_cnn: onnx.ModelProto) -> None:
    before = tiny_cnn.SerializeToString()
    target = onnx.ModelProto()
    returned = quantize_dynamic(tiny_cnn, target)
    assert tiny_cnn.SerializeToString() == before  # the input proto is left alone
    assert target == returned
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(tiny_cnn, src)
    quantize_dynamic(src, dst)
    assert onnx.load(dst) == returned
    with pytest.raises(NoSuchFile, match=r"missing\.onnx"):
        quantize_dynamic(tmp_path / "missing.onnx", dst)


def test_excluded_nodes_stay_float(tiny_cnn: onnx.ModelProto) -> None:
    quant = quantize_dynamic(tiny_cnn, None, nodes_to_exclude=["conv1"])
    assert [n.name for n in quant.graph.node if n.op_type == "Conv"] == ["conv1"]
    quant = quantize_dynamic(tiny_cnn, None, op_types_to_quantize=["Gemm"])
    ops = [n.op_type for n in quant.graph.node]
    assert ops.count("Conv") == 2 and ops.count("MatMulInteger") == 1


def test_options_onnxruntime_ignores_are_logged(
    tiny_cnn: onnx.ModelProto, caplog: pytest.LogCaptureFixture
) -> None:
    # an absent node, an op turnout leaves float, an unknown key: onnxruntime goes on, so does
    # turnout, and the log names each
    with caplog.at_level("WARNING", logger="turnout.tools.quantization"):
        quant = quantize_dynamic(
            tiny_cnn,
            None,
            nodes_to_exclude=["conv9"],
            op_types_to_quantize=["Conv", "LSTM"],
            extra_options={"Bogus": 1},
        )
    assert [n.op_type for n in quant.graph.node].count("ConvInteger") == 2
    for word in ("conv9", "LSTM", "Bogus"):
        assert word in caplog.text


def test_bad_options_are_named(tiny_cnn: onnx.ModelProto) -> None:
    with pytest.raises(TurnoutNotImplemented, match=r"EnableSubgraph.*supports only False"):
        quantize_dynamic(tiny_cnn, None, extra_options={"EnableSubgraph": True})
    # onnxruntime's options at the value that is turnout's behaviour pass
    quantize_dynamic(tiny_cnn, None, extra_options={"EnableSubgraph": False})
    with pytest.raises(TurnoutNotImplemented, match="weight_type"):
        quantize_dynamic(tiny_cnn, None, weight_type="QInt4")  # type: ignore[arg-type]
    with pytest.raises(TurnoutNotImplemented, match="8-bit weights"):
        quantize_dynamic(tiny_cnn, None, weight_type=QuantType.QInt16)


def _unchanged_with_reason(model: onnx.ModelProto, caplog: pytest.LogCaptureFixture) -> str:
    """The log of quantize_dynamic on `model`, which must come back unchanged (as
    onnxruntime writes a model it cannot quantize)."""
    with caplog.at_level("WARNING", logger="turnout.tools.quantization"):
        quant = quantize_dynamic(model, None)
    assert quant.graph.node == model.graph.node
    return caplog.text


def test_onnxruntime_enums_are_accepted(tiny_cnn: onnx.ModelProto) -> None:
    ort_quant = pytest.importorskip("onnxruntime.quantization", reason="checks its enums")
    quant = quantize_dynamic(tiny_cnn, None, weight_type=ort_quant.QuantType.QUInt8)
    inits = {t.name: t for t in quant.graph.initializer}
    weight = next(n for n in quant.graph.node if n.op_type == "ConvInteger").input[1]
    assert inits[weight].data_type == TensorProto.UINT8


def test_nothing_to_quantize_says_why(
    rng: np.random.Generator, caplog: pytest.LogCaptureFixture
) -> None:
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "y"], ["z"], "mm"),
            helper.make_node("Relu", ["z"], ["r"]),
        ],
        "no_weights",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2]),
        ],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert "MatMul 'mm': its input B is not an initializer" in _unchanged_with_reason(model, caplog)


def test_an_overridable_initializer_is_not_a_weight(
    rng: np.random.Generator, caplog: pytest.LogCaptureFixture
) -> None:
    w = numpy_helper.from_array(rng.standard_normal((3, 2)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], "mm")],
        "ir3",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 2]),  # a feed may replace it
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert "not an initializer" in _unchanged_with_reason(model, caplog)


def test_weights_inside_control_flow_are_named_as_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from turnout_testbed.apps import vad_like

    assert "nodes inside If bodies are not quantized" in _unchanged_with_reason(vad_like(), caplog)


def test_external_data_format_writes_weights_beside_the_model(
    tmp_path: Path, tiny_cnn: onnx.ModelProto
) -> None:
    dst = tmp_path / "q.onnx"
    returned = quantize_dynamic(tiny_cnn, dst, use_external_data_format=True)
    assert (tmp_path / "q.onnx.data").is_file()
    assert dst.stat().st_size < returned.ByteSize() / 2  # the weights are not in the .onnx
    loaded = {t.name: numpy_helper.to_array(t) for t in onnx.load(dst).graph.initializer}
    held = {t.name: numpy_helper.to_array(t) for t in returned.graph.initializer}
    assert loaded.keys() == held.keys()  # the returned model still holds the weights
    assert all(np.array_equal(loaded[k], held[k]) for k in held)
