"""fold_qdq: DequantizeLinear -> Conv/MatMul -> QuantizeLinear units become QLinearConv /
QLinearMatMul where the integer op gives onnxruntime's result, on models quantized by
onnxruntime.quantization (QDQ format) and on hand-built units that must not fold."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.api.options import GraphOptimizationLevel, SessionOptions
from turnout.api.session import InferenceSession
from turnout.engine.evaluate import optimize
from turnout.optimizer import Level
from turnout_testbed import zoo

ort = pytest.importorskip(
    "onnxruntime", reason="onnxruntime quantizes the models and is the oracle"
)
oq = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization makes QDQ")

TOLERANCE = 0.02  # of the output's range, against onnxruntime (issue 15)


class _Reader:
    """A few random batches for calibration (a CalibrationDataReader by its method)."""

    def __init__(self, name: str, shape: list[int]) -> None:
        rng = np.random.default_rng(0)
        self.data = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.data, None)


def _qdq(model: onnx.ModelProto, tmp: Any, ops: list[str], per_channel: bool) -> onnx.ModelProto:
    src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "qdq.onnx")
    onnx.save(model, src)
    x = model.graph.input[0]
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    oq.quantize_static(
        src, dst, _Reader(x.name, shape), quant_format=oq.QuantFormat.QDQ,
        op_types_to_quantize=ops, per_channel=per_channel,
        activation_type=oq.QuantType.QUInt8, weight_type=oq.QuantType.QInt8,
    )  # fmt: skip
    return onnx.load(dst)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    x = model.graph.input[0]
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    return {x.name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}


def _turnout(model: onnx.ModelProto, level: Level, provider: str) -> InferenceSession:
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel(int(level))
    so.intra_op_num_threads = 1
    return InferenceSession(model.SerializeToString(), so, providers=[provider])


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return np.asarray(s.run(None, feeds)[0])


def _gap(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference as a fraction of the output's range."""
    span = float(want.max() - want.min()) or 1.0
    return float(np.abs(got.astype(np.float64) - want).max()) / span


PROVIDERS = ["CPUExecutionProvider", "NumbaExecutionProvider"]


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("per_channel", [False, True])
def test_resnet_convs_fold(tmp_path: Any, provider: str, per_channel: bool) -> None:
    pytest.importorskip("turnout_numba", reason="the numba provider runs the integer ops")
    # BatchNormalization folded first, as onnxruntime's quantization pre-processing does
    light, _ = optimize(zoo.resnet18_like(size=32), Level.BASIC)
    model = _qdq(light, tmp_path, ["Conv", "Add", "Relu"], per_channel)
    convs = Counter(n.op_type for n in model.graph.node)["Conv"]
    feeds = _feeds(model)
    sess = _turnout(model, Level.ALL, provider)
    ops = sess.optimization_report().ops_after
    assert ops.get("QLinearConv") == convs and "Conv" not in ops
    assert sess.optimization_report().fired("fold_qdq")
    want = _onnxruntime(model, feeds)
    assert _gap(sess.run(None, feeds)[0], want) <= TOLERANCE
    # the QDQ form itself, unfolded (BASIC keeps the units: constant folding leaves their DQs)
    basic = _turnout(model, Level.BASIC, provider)
    assert "QLinearConv" not in basic.optimization_report().ops_after
    assert basic.optimization_report().ops_after["DequantizeLinear"] >= 2 * convs
    assert _gap(basic.run(None, feeds)[0], want) <= TOLERANCE


@pytest.mark.parametrize("provider", PROVIDERS)
def test_mlp_matmuls_fold(tmp_path: Any, provider: str) -> None:
    pytest.importorskip("turnout_numba", reason="the numba provider runs the integer ops")
    model = _qdq(zoo.mlp(batch=8), tmp_path, ["MatMul", "Add", "Relu"], per_channel=False)
    matmuls = Counter(n.op_type for n in model.graph.node)["MatMul"]
    feeds = _feeds(model)
    sess = _turnout(model, Level.ALL, provider)
    ops = sess.optimization_report().ops_after
    assert matmuls and ops.get("QLinearMatMul") == matmuls and "MatMul" not in ops
    assert _gap(sess.run(None, feeds)[0], _onnxruntime(model, feeds)) <= TOLERANCE


# ------------------------------------------------------------------ hand-built units


def _init(name: str, v: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v), name)


def _unit(
    op: str = "Conv",
    *,
    w_shape: tuple[int, ...] = (4, 3, 3, 3),
    between: str = "",
    bias_scale: float | None = None,
    extra_reader: bool = False,
    w_dtype: Any = np.int8,
) -> onnx.ModelProto:
    """DQ(x) and DQ(w) -> Conv/MatMul [-> between] -> Q, with options that break the fold."""
    rng = np.random.default_rng(0)
    conv = op == "Conv"
    x_shape = [1, w_shape[1], 6, 6] if conv else [2, w_shape[0]]
    info = np.iinfo(w_dtype)
    w = rng.integers(info.min, info.max, w_shape, endpoint=True).astype(w_dtype)
    inits = [
        _init("x_s", np.float32(0.05)), _init("x_z", np.uint8(128)), _init("w", w),
        _init("w_s", np.float32(0.01)), _init("w_z", np.zeros((), w_dtype)),
        _init("y_s", np.float32(0.2)), _init("y_z", np.uint8(100)),
    ]  # fmt: skip
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xf"]),
        helper.make_node("DequantizeLinear", ["w", "w_s", "w_z"], ["wf"]),
    ]
    inputs = ["xf", "wf"]
    if bias_scale is not None:
        inits += [
            _init("b", np.arange(w_shape[0], dtype=np.int32)),
            _init("b_s", np.float32(bias_scale)),
        ]
        nodes.append(helper.make_node("DequantizeLinear", ["b", "b_s"], ["bf"]))
        inputs.append("bf")
    attrs: dict[str, Any] = {"pads": [1] * 4} if conv else {}
    nodes.append(helper.make_node(op, inputs, ["yf"], **attrs))
    q_in = "yf"
    if between:
        nodes.append(helper.make_node(between, ["yf"], ["yb"]))
        q_in = "yb"
    nodes.append(helper.make_node("QuantizeLinear", [q_in, "y_s", "y_z"], ["yq"]))
    outputs = [helper.make_tensor_value_info("yq", TensorProto.UINT8, None)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["xf"], ["xr"]))
        outputs.append(helper.make_tensor_value_info("xr", TensorProto.FLOAT, None))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("xq", TensorProto.UINT8, x_shape)],
        outputs,
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _folded(model: onnx.ModelProto) -> dict[str, int]:
    _, report = optimize(model, Level.ALL)
    return report.ops_after


def _same_as_onnxruntime(model: onnx.ModelProto) -> None:
    x = model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    feeds = {x.name: np.random.default_rng(2).integers(0, 255, shape).astype(np.uint8)}
    got = _turnout(model, Level.ALL, "CPUExecutionProvider").run(None, feeds)
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for a, b in zip(got, s.run(None, feeds)):
        assert np.abs(a.astype(np.int32) - b.astype(np.int32)).max() <= 1


@pytest.mark.onnxruntime_exact_8bit
def test_conv_and_matmul_units_fold() -> None:
    assert _folded(_unit()) == {"QLinearConv": 1}
    assert _folded(_unit(bias_scale=0.05 * 0.01)) == {"QLinearConv": 1}
    assert _folded(_unit("MatMul", w_shape=(5, 7))) == {"QLinearMatMul": 1}
    assert _folded(_unit(w_dtype=np.uint8)) == {"QLinearConv": 1}
    for m in (_unit(bias_scale=0.05 * 0.01), _unit("MatMul", w_shape=(5, 7))):
        _same_as_onnxruntime(m)


def test_units_that_must_not_fold() -> None:
    # an op between the product and its Q
    assert "QLinearConv" not in _folded(_unit(between="Relu"))
    # a bias whose scale is not x_scale * w_scale: QLinearConv would misread it
    assert "QLinearConv" not in _folded(_unit(bias_scale=0.001))
    # a sum that could overflow int32: K * 128 (|x - 128|) * 128 (|w|) >= 2**31
    assert "QLinearMatMul" not in _folded(_unit("MatMul", w_shape=(140_000, 1)))
    assert "QLinearMatMul" in _folded(_unit("MatMul", w_shape=(120_000, 1)))


@pytest.mark.onnxruntime_exact_8bit
def test_a_shared_dequantize_stays_for_its_other_reader() -> None:
    ops = _folded(_unit(extra_reader=True))
    assert ops.get("QLinearConv") == 1 and ops.get("DequantizeLinear") == 1
    _same_as_onnxruntime(_unit(extra_reader=True))


def test_basic_level_does_not_fold() -> None:
    _, report = optimize(_unit(), Level.BASIC)
    assert report.ops_after.get("Conv") == 1 and report.ops_after.get("DequantizeLinear") == 2


# ------------------------------------------------------------------ dynamic quantization


def _dynamic(model: onnx.ModelProto, tmp: Any, weight_type: Any) -> onnx.ModelProto:
    src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "dyn.onnx")
    onnx.save(model, src)
    oq.quantize_dynamic(src, dst, weight_type=weight_type, op_types_to_quantize=["MatMul"])
    return onnx.load(dst)


@pytest.mark.parametrize("weights", ["QInt8", "QUInt8"])
def test_dynamic_quant_matmul_fuses(tmp_path: Any, weights: str) -> None:
    """quantize_dynamic's DynamicQuantizeLinear/MatMulInteger/Cast/Mul chains fuse into
    com.microsoft::DynamicQuantizeMatMul, as onnxruntime fuses them; each provider's kernel for
    it gives the unfused graph's result, bit for bit."""
    model = _dynamic(zoo.mlp(batch=8), tmp_path, getattr(oq.QuantType, weights))
    chains = Counter(n.op_type for n in model.graph.node)["MatMulInteger"]
    feeds = _feeds(model)
    want = _onnxruntime(model, feeds)
    for provider in PROVIDERS:
        if provider == "NumbaExecutionProvider":
            pytest.importorskip("turnout_numba", reason="the numba provider runs the fused op")
        sess = _turnout(model, Level.ALL, provider)
        ops = sess.optimization_report().ops_after
        assert chains and ops.get("com.microsoft::DynamicQuantizeMatMul") == chains
        assert not {"DynamicQuantizeLinear", "MatMulInteger", "Cast"} & set(ops)
        unfused = _turnout(model, Level.BASIC, provider).run(None, feeds)[0]
        got = sess.run(None, feeds)[0]
        np.testing.assert_array_equal(got, unfused)
        assert _gap(got, want) <= TOLERANCE


def test_dynamic_quant_shared_by_projections(tmp_path: Any) -> None:
    """One DynamicQuantizeLinear read by several MatMulIntegers (Q/K/V of one input) fuses
    into each, and goes with the last."""
    model = _dynamic(zoo.bert_like(), tmp_path, oq.QuantType.QInt8)
    dqls = Counter(n.op_type for n in model.graph.node)["DynamicQuantizeLinear"]
    chains = Counter(n.op_type for n in model.graph.node)["MatMulInteger"]
    assert chains > dqls  # some are shared
    _, report = optimize(model, Level.ALL)
    assert report.ops_after.get("com.microsoft::DynamicQuantizeMatMul") == chains
    assert "DynamicQuantizeLinear" not in report.ops_after


# ------------------------------------------------------------------ element-wise chains


def _chain(dt: Any, ops: list[tuple[str, Any]], *, output_between: bool = False) -> onnx.ModelProto:
    """DQ(x) -> ops (each a unary op, or a binary op with a constant) -> Q, x of type `dt`."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    inits = [_init("x_s", np.float32(0.03)), _init("x_z", dt(7)), _init("y_s", np.float32(0.01)),
             _init("y_z", dt(-20 if dt == np.int8 else 20))]  # fmt: skip
    nodes = [helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["v0"])]
    for i, (op, c) in enumerate(ops):
        ins = [f"v{i}"]
        if c is not None:
            inits.append(_init(f"c{i}", np.float32(c)))
            ins = [f"c{i}", f"v{i}"] if op == "Sub" else [f"v{i}", f"c{i}"]
        nodes.append(helper.make_node(op, ins, [f"v{i + 1}"]))
    nodes.append(helper.make_node("QuantizeLinear", [f"v{len(ops)}", "y_s", "y_z"], ["yq"]))
    outputs = [helper.make_tensor_value_info("yq", elem, None)]
    if output_between:
        outputs.append(helper.make_tensor_value_info("v1", TensorProto.FLOAT, None))
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("xq", elem, [2, 3, 50])], outputs, inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


GELU_HALF = [("Div", 1.4142135), ("Erf", None)]  # what QOperator BERTs keep in float


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize(
    "ops", [GELU_HALF, [("Erf", None)], [("Sub", 0.5), ("Erf", None), ("Mul", 3.0), ("Tanh", None)]]
)
def test_elementwise_chain_becomes_a_table(dt: Any, ops: list[tuple[str, Any]]) -> None:
    """DQ -> element-wise chain -> Q becomes Cast + Gather of a 256-code table: every code's
    result within one step of the unfolded graph on turnout and of onnxruntime."""
    model = _chain(dt, ops)
    assert _folded(model) == {"Cast": 1, "Gather": 1}
    info = np.iinfo(dt)
    x = np.arange(info.min, info.max + 1).astype(dt)
    x = np.concatenate([x, x[:44]]).reshape(2, 3, 50)  # every code
    feeds = {"xq": x}
    got = _turnout(model, Level.ALL, "CPUExecutionProvider").run(None, feeds)[0]
    plain = _turnout(model, Level.DISABLE, "CPUExecutionProvider").run(None, feeds)[0]
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    assert got.dtype == dt and got.shape == x.shape
    for other in (plain, want):
        assert np.abs(got.astype(np.int32) - other.astype(np.int32)).max() <= 1


def test_elementwise_chains_that_must_not_become_tables() -> None:
    # a value inside the chain is also a graph output
    assert "Gather" not in _folded(_chain(np.uint8, GELU_HALF, output_between=True))
    # an op that is not element-wise
    assert "Gather" not in _folded(_chain(np.uint8, [("Softmax", None)]))
    # cheap ops only: their fused float pass is faster than the lookup
    assert "Gather" not in _folded(_chain(np.uint8, [("Sigmoid", None)]))
    assert "Gather" not in _folded(_chain(np.uint8, [("Mul", 0.5), ("Add", 1.0)]))


# ------------------------------------------------------------------ com.microsoft units


def _activation_unit(op: str) -> onnx.ModelProto:
    """DQ(a), DQ(b) -> Add/Mul/MatMul -> Q, or DQ(a) -> Softmax -> Q; a and b both inputs."""
    inits = [_init("a_s", np.float32(0.04)), _init("a_z", np.uint8(120)),
             _init("b_s", np.float32(0.03)), _init("b_z", np.uint8(130)),
             _init("y_s", np.float32(0.05 if op != "Softmax" else 1 / 256)),
             _init("y_z", np.uint8(110 if op != "Softmax" else 0))]  # fmt: skip
    a_shape = [2, 4, 5, 8] if op == "MatMul" else [2, 4, 5, 6]
    b_shape = [2, 4, 8, 6] if op == "MatMul" else [6]
    nodes = [helper.make_node("DequantizeLinear", ["a", "a_s", "a_z"], ["af"])]
    ins = [helper.make_tensor_value_info("a", TensorProto.UINT8, a_shape)]
    if op != "Softmax":
        nodes.append(helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["bf"]))
        ins.append(helper.make_tensor_value_info("b", TensorProto.UINT8, b_shape))
    nodes.append(helper.make_node(op, ["af", "bf"] if op != "Softmax" else ["af"], ["yf"]))
    nodes.append(helper.make_node("QuantizeLinear", ["yf", "y_s", "y_z"], ["yq"]))
    out = [helper.make_tensor_value_info("yq", TensorProto.UINT8, None)]
    g = helper.make_graph(nodes, "g", ins, out, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("op", "folded"),
    [
        ("Add", "com.microsoft::QLinearAdd"),
        ("Mul", "com.microsoft::QLinearMul"),
        ("Softmax", "com.microsoft::QLinearSoftmax"),
    ],
)
def test_activation_units_fold(op: str, folded: str) -> None:
    """Units of activations (a bias or residual Add, GELU's Mul, attention's Softmax) fold
    as onnxruntime's QDQ transformer folds them; outputs within one step of onnxruntime and of
    the unfolded graph."""
    model = _activation_unit(op)
    assert _folded(model) == {folded: 1}
    rng = np.random.default_rng(3)
    feeds = {
        i.name: rng.integers(0, 255, [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.uint8
        )
        for i in model.graph.input
    }
    got = _turnout(model, Level.ALL, "CPUExecutionProvider").run(None, feeds)[0]
    plain = _turnout(model, Level.DISABLE, "CPUExecutionProvider").run(None, feeds)[0]
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    for other in (plain, want):
        assert np.abs(got.astype(np.int32) - other.astype(np.int32)).max() <= 1


def test_activation_matmul_does_not_fold() -> None:
    """A product of two activations stays in float, where it runs faster."""
    assert "QLinearMatMul" not in _folded(_activation_unit("MatMul"))


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_unit_with_a_quantized_constant_folds(op: str) -> None:
    """A bias or scale constant quantized with the activations (DQ of an initializer) is left
    to fold_qdq by constant folding, so the unit becomes QLinearAdd/QLinearMul."""
    model = _activation_unit(op)
    b = model.graph.input[1]
    shape = [d.dim_value for d in b.type.tensor_type.shape.dim]
    del model.graph.input[1]
    model.graph.initializer.append(
        _init("b", np.random.default_rng(1).integers(0, 255, shape).astype(np.uint8))
    )
    assert _folded(model) == {f"com.microsoft::QLinear{op}": 1}
    feeds = {"a": np.random.default_rng(2).integers(0, 255, (2, 4, 5, 6)).astype(np.uint8)}
    got = _turnout(model, Level.ALL, "CPUExecutionProvider").run(None, feeds)[0]
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
