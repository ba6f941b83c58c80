"""The optimizer's static-shape work: each rewrite removes the nodes it should (node counts)
and the optimized model still computes what onnxruntime computes on the original."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.loader import DATA_DIR

from turnout.optimizer import Level, optimize
from turnout.options import GraphOptimizationLevel, ResourceLimits, SessionOptions
from turnout.session import InferenceSession

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[onnx.TensorProto] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "t", inputs, outputs, inits or [])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _ort_run(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def _unoptimized(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any]:
    """The optimized model run by turnout as it is (no second optimization)."""
    opts = SessionOptions()
    opts.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def _same_as_ort(
    original: onnx.ModelProto,
    optimized: onnx.ModelProto,
    feeds: dict[str, Any],
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """The optimized model, run by turnout and by onnxruntime, matches onnxruntime on the
    original model."""
    want = _ort_run(original, feeds)
    for got in (_unoptimized(optimized, feeds), _ort_run(optimized, feeds)):
        assert len(got) == len(want)
        for w, g in zip(want, got):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


# --- BatchNormalization into Conv, weights from ConstantOfShape -------------------------------
def _conv_bn_of_filled_weight(channels: int = 8) -> onnx.ModelProto:
    """Conv whose weight is a ConstantOfShape (as the onnx light models write them) -> BN."""
    rng = np.random.default_rng(0)
    fill = helper.make_tensor("v", F, [1], [0.02])
    bn = [
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(channels)).astype(np.float32), n)
        for n in ("scale", "bias", "mean")
    ] + [numpy_helper.from_array((0.5 + rng.random(channels)).astype(np.float32), "var")]
    shape = numpy_helper.from_array(np.array([channels, 3, 3, 3], np.int64), "w_shape")
    return _model(
        [
            helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=fill),
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, [1, channels, 8, 8])],
        [shape, *bn],
    )


def test_bn_folds_into_a_conv_whose_weight_is_over_the_folding_cap() -> None:
    model = _conv_bn_of_filled_weight()
    # the weight (216 elements) is over this cap: constant folding leaves it a node
    out, rep = optimize(model, Level.BASIC, fold_max_elements=100)
    assert _ops(out) == ["Conv"] and rep.fired("fold_conv_bn")
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    _same_as_ort(model, out, {"x": x})


def test_materialized_weights_stay_within_the_folding_budget() -> None:
    model = _conv_bn_of_filled_weight()
    limits = ResourceLimits(fold_max_elements=100, fold_max_total_bytes=500)  # weight: 864 B
    out, _ = optimize(model, Level.BASIC, limits=limits)
    assert _ops(out) == ["ConstantOfShape", "Conv", "BatchNormalization"]
    limits = ResourceLimits(fold_max_elements=100, max_tensor_elements=200)
    out, _ = optimize(model, Level.BASIC, limits=limits)
    assert "BatchNormalization" in _ops(out)


def test_light_resnet50_folds_every_batch_norm_as_onnxruntime_does() -> None:
    path = os.path.join(DATA_DIR, "light", "light_resnet50.onnx")
    model = onnx.load(path)
    assert _ops(model).count("BatchNormalization") == 53
    out, rep = optimize(model, Level.ALL)
    assert "BatchNormalization" not in rep.ops_after, rep.ops_after
    assert rep.changes()["fold_conv_bn"] == 53
    x = np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype(np.float32)
    want = _ort_run(model, {"gpu_0/data_0": x})
    got = _unoptimized(out, {"gpu_0/data_0": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-6)
