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

from turnout.api.options import GraphOptimizationLevel, ResourceLimits, SessionOptions
from turnout.api.session import InferenceSession
from turnout.engine.evaluate import optimize
from turnout.optimizer import Level

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


def _same_under_reference(
    original: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict[str, Any]
) -> None:
    """onnx.reference computes the same on both models (whatever it computes: on a Loop
    without a condition input it disagrees with onnxruntime, on both models alike)."""
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(original).run(None, feeds)
    got = ReferenceEvaluator(optimized).run(None, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


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
    _same_under_reference(model, out, {"x": x})


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


# --- shape computations of static inputs fold -------------------------------------------------
def _const(name: str, value: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value), name)


def _shape_work(x_shape: list[Any]) -> onnx.ModelProto:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Size -> Cast -> Range, Shape ->
    ConstantOfShape, a Constant node and a Squeeze of a constant."""
    one = helper.make_tensor("v", F, [1], [1.0])
    return _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
            helper.make_node("Unsqueeze", ["d0", "ax0"], ["d0u"]),
            helper.make_node("Concat", ["d0u", "minus1"], ["shape"], axis=0),
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Size", ["x"], ["n"]),
            helper.make_node("Cast", ["n"], ["nf"], to=F),
            helper.make_node("Range", ["zero", "nf", "step"], ["rg"]),
            helper.make_node("Shape", ["r"], ["rs"]),
            helper.make_node("ConstantOfShape", ["rs"], ["ones"], value=one),
            helper.make_node("Add", ["r", "ones"], ["y"]),
            helper.make_node("Constant", [], ["k"], value_floats=[3.0]),
            helper.make_node("Squeeze", ["k", "ax0"], ["ks"]),
            helper.make_node("Mul", ["rg", "ks"], ["m"]),
            helper.make_node("ReduceSum", ["m"], ["z"], keepdims=0),
        ],
        [helper.make_tensor_value_info("x", F, x_shape)],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("z", F, None)],
        [
            _const("i0", np.int64(0)),
            _const("ax0", np.array([0], np.int64)),
            _const("minus1", np.array([-1], np.int64)),
            _const("zero", np.float32(0)),
            _const("step", np.float32(1)),
        ],
    )


def test_shape_computations_of_static_inputs_fold_at_creation() -> None:
    model = _shape_work([2, 3, 4])
    out, rep = optimize(model, Level.BASIC)
    # everything but the data path: Reshape by a constant shape, the Add, the final reduction
    assert _ops(out) == ["Reshape", "Add", "ReduceSum"], _ops(out)
    # the Shape -> ... -> Concat chain and Shape -> ConstantOfShape fold in the first sweep
    # (Range's size is known once its limit is a constant: the next one)
    first = next(r for r in rep.results if r.name == "fold_constants")
    assert first.changes == 10
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    _same_as_ort(model, out, {"x": x})
    _same_under_reference(model, out, {"x": x})


def test_shape_computations_of_dynamic_dims_stay() -> None:
    model = _shape_work(["batch", 3, 4])
    out, _ = optimize(model, Level.BASIC)
    ops = _ops(out)
    assert {"Shape", "Size", "Range", "ConstantOfShape"} <= set(ops), ops
    x = np.random.default_rng(4).standard_normal((5, 3, 4)).astype(np.float32)
    _same_as_ort(model, out, {"x": x})


# --- no-ops -----------------------------------------------------------------------------------
def _noops(x_shape: list[Any]) -> onnx.ModelProto:
    return _model(
        [
            helper.make_node("Squeeze", ["x", "ax1"], ["sq"]),
            helper.make_node("Unsqueeze", ["sq", "ax1"], ["us"]),
            helper.make_node("Relu", ["us"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "ax0"], ["u0"]),
            helper.make_node("Squeeze", ["u0", "ax0"], ["s0"]),
            helper.make_node("Shape", ["s0"], ["sh"]),
            helper.make_node("Reshape", ["s0", "sh"], ["rs"]),
            helper.make_node("Expand", ["rs", "ones"], ["ex"]),
            helper.make_node("Cast", ["ex"], ["ca"], to=F),
            helper.make_node("Identity", ["ca"], ["y"]),
            helper.make_node("Identity", ["x"], ["y2"]),  # input to output: stays
            helper.make_node("Identity", ["y"], ["y3"]),  # one output to another: stays
        ],
        [helper.make_tensor_value_info("x", F, x_shape)],
        [helper.make_tensor_value_info(n, F, None) for n in ("y", "y2", "y3")],
        [
            _const("ax1", np.array([1], np.int64)),
            _const("ax0", np.array([0], np.int64)),
            _const("ones", np.array([1, 1], np.int64)),
        ],
    )


def test_noops_go_with_symbolic_dims_and_graph_outputs_keep_their_names() -> None:
    model = _noops(["batch", 1, 5])
    out, _ = optimize(model, Level.BASIC)
    got = [(n.op_type, list(n.input), list(n.output)) for n in out.graph.node]
    assert got == [("Relu", ["x"], ["y"]), ("Identity", ["x"], ["y2"]), ("Identity", ["y"], ["y3"])]
    assert [o.name for o in out.graph.output] == ["y", "y2", "y3"]
    x = np.random.default_rng(5).standard_normal((3, 1, 5)).astype(np.float32)
    _same_as_ort(model, out, {"x": x})
    _same_under_reference(model, out, {"x": x})


def test_squeeze_of_a_dim_not_known_to_be_one_stays() -> None:
    model = _noops(["batch", "n", 5])  # Squeeze(axis 1) fails at run time unless n == 1
    out, _ = optimize(model, Level.BASIC)
    assert _ops(out)[:2] == ["Squeeze", "Unsqueeze"], _ops(out)
    x = np.random.default_rng(6).standard_normal((3, 1, 5)).astype(np.float32)
    _same_as_ort(model, out, {"x": x})


def test_shape_op_chains_back_to_the_start_go_and_others_stay() -> None:
    model = _model(
        [
            helper.make_node("Reshape", ["x", "flat"], ["f"]),
            helper.make_node("Unsqueeze", ["f", "ax0"], ["u"]),
            helper.make_node("Reshape", ["u", "back"], ["b"]),  # x's shape again
            helper.make_node("Reshape", ["x", "other"], ["o"]),  # a real reshape
            helper.make_node("Add", ["b", "x"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [2, 6])],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("o", F, None)],
        [
            _const("flat", np.array([12], np.int64)),
            _const("ax0", np.array([0], np.int64)),
            _const("back", np.array([2, 6], np.int64)),
            _const("other", np.array([3, 4], np.int64)),
        ],
    )
    out, _ = optimize(model, Level.BASIC)
    assert sorted(_ops(out)) == ["Add", "Reshape"]
    x = np.random.default_rng(7).standard_normal((2, 6)).astype(np.float32)
    _same_as_ort(model, out, {"x": x})


# --- nested graphs ----------------------------------------------------------------------------
V = helper.make_tensor_value_info


def _constant(out: str, value: Any) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [out], value=numpy_helper.from_array(np.array(value)))


def _body_ops(model: onnx.ModelProto) -> list[str]:
    """The op types inside every nested graph, at any depth."""
    out: list[str] = []

    def walk(g: onnx.GraphProto) -> None:
        for n in g.node:
            for a in n.attribute:
                for sub in [a.g] if a.type == a.GRAPH else list(a.graphs):
                    out.extend(m.op_type for m in sub.node)
                    walk(sub)

    walk(model.graph)
    return out


def _if_on_static_size() -> onnx.ModelProto:
    """An If on Size(x) == 6 (a constant once x's shape is known) whose taken branch holds
    Constant nodes, an initializer, an If on a graph input reading a branch value, and an
    output that is a graph input passed through."""
    inner_then = helper.make_graph(
        [helper.make_node("Mul", ["t2", "t2"], ["it"])], "inner_then", [], [V("it", F, [2, 3])]
    )
    inner_else = helper.make_graph(
        [helper.make_node("Neg", ["t2"], ["ie"])], "inner_else", [], [V("ie", F, [2, 3])]
    )
    then = helper.make_graph(
        [
            _constant("t0", np.float32(2.0)),
            helper.make_node("Mul", ["x", "t0"], ["t1"]),
            helper.make_node("Add", ["t1", "tb"], ["t2"]),
            helper.make_node(
                "If", ["flag"], ["t3"], then_branch=inner_then, else_branch=inner_else
            ),
            helper.make_node("Identity", ["x"], ["tx"]),
        ],
        "then",
        [],
        [V("t3", F, [2, 3]), V("tx", F, [2, 3])],
        [_const("tb", np.float32(0.5))],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e0"]), helper.make_node("Abs", ["x"], ["e1"])],
        "else",
        [],
        [V("e0", F, [2, 3]), V("e1", F, [2, 3])],
    )
    return _model(
        [
            helper.make_node("Size", ["x"], ["n"]),
            helper.make_node("Equal", ["n", "six"], ["is6"]),
            helper.make_node("If", ["is6"], ["y", "z"], then_branch=then, else_branch=other),
        ],
        [V("x", F, [2, 3]), V("flag", TensorProto.BOOL, [])],
        [V("y", F, [2, 3]), V("z", F, [2, 3])],
        [_const("six", np.int64(6))],
    )


def test_if_on_a_folded_condition_is_inlined_with_unique_names() -> None:
    model = _if_on_static_size()
    out, rep = optimize(model, Level.BASIC)
    assert rep.fired("inline_constant_if")
    # the taken branch's Mul and Add and the inner If (on a graph input, it stays), and an
    # Identity that writes z from x (x is a graph input: no node can be renamed to z)
    assert sorted(_ops(out)) == ["Add", "Identity", "If", "Mul"], _ops(out)
    assert "Constant" not in _body_ops(out)
    onnx.checker.check_model(out, full_check=True)
    x = np.random.default_rng(8).standard_normal((2, 3)).astype(np.float32)
    for flag in (True, False):
        _same_as_ort(model, out, {"x": x, "flag": np.array(flag)})
        _same_under_reference(model, out, {"x": x, "flag": np.array(flag)})


def test_if_on_a_graph_input_stays_and_its_branch_constants_fold() -> None:
    then = helper.make_graph(
        [
            _constant("k1", np.float32(2.0)),
            _constant("k2", np.float32(3.0)),
            helper.make_node("Mul", ["k1", "k2"], ["k3"]),
            helper.make_node("Add", ["k3", "w"], ["k4"]),  # w: an initializer of the outer graph
            helper.make_node("Identity", ["k4"], ["k5"]),
            helper.make_node("Mul", ["x", "k5"], ["tout"]),
        ],
        "then",
        [],
        [V("tout", F, [2, 3])],
    )
    other = helper.make_graph(
        [
            _constant("shape", np.array([3, 2], np.int64)),
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Transpose", ["r"], ["eout"]),
        ],
        "else",
        [],
        [V("eout", F, [2, 3])],
    )
    model = _model(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)],
        [V("x", F, [2, 3]), V("flag", TensorProto.BOOL, [])],
        [V("y", F, [2, 3])],
        [_const("w", np.arange(6, dtype=np.float32).reshape(2, 3))],
    )
    out, rep = optimize(model, Level.BASIC)
    assert _ops(out) == ["If"] and rep.fired("fold_subgraphs")
    assert sorted(_body_ops(out)) == ["Mul", "Reshape", "Transpose"], _body_ops(out)
    x = np.random.default_rng(9).standard_normal((2, 3)).astype(np.float32)
    for flag in (True, False):
        _same_as_ort(model, out, {"x": x, "flag": np.array(flag)})
        _same_under_reference(model, out, {"x": x, "flag": np.array(flag)})


def test_loop_and_scan_bodies_fold_their_constants() -> None:
    loop_body = helper.make_graph(
        [
            _constant("two", np.float32(2.0)),
            helper.make_node("Mul", ["w", "two"], ["w2"]),  # loop-invariant: folds once
            helper.make_node("Add", ["acc", "w2"], ["acc2"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "loop_body",
        [V("i", I64, []), V("cond_in", TensorProto.BOOL, []), V("acc", F, [2, 3])],
        [V("cond_out", TensorProto.BOOL, []), V("acc2", F, [2, 3])],
    )
    scan_body = helper.make_graph(
        [
            _constant("half", np.float32(0.5)),
            helper.make_node("Mul", ["row", "half"], ["scaled"]),
            helper.make_node("Add", ["s", "scaled"], ["s2"]),
            helper.make_node("Identity", ["s2"], ["s_out"]),
        ],
        "scan_body",
        [V("s", F, [3]), V("row", F, [3])],
        [V("s2", F, [3]), V("s_out", F, [3])],
    )
    model = _model(
        [
            helper.make_node("Loop", ["trips", "", "x"], ["lp"], body=loop_body),
            helper.make_node(
                "Scan", ["s0", "lp"], ["final", "rows"], body=scan_body, num_scan_inputs=1
            ),
        ],
        [V("x", F, [2, 3])],
        [V("final", F, [3]), V("rows", F, [2, 3])],
        [
            _const("w", np.arange(6, dtype=np.float32).reshape(2, 3)),
            _const("trips", np.int64(3)),
            _const("s0", np.zeros(3, np.float32)),
        ],
    )
    out, _ = optimize(model, Level.BASIC)
    assert _ops(out) == ["Loop", "Scan"]
    # left in the bodies: the loop's Add and its condition pass-through, the scan's Mul, Add
    # and the Identity that writes a second output from the first
    assert sorted(_body_ops(out)) == ["Add", "Add", "Identity", "Identity", "Mul"]
    x = np.random.default_rng(10).standard_normal((2, 3)).astype(np.float32)
    _same_as_ort(model, out, {"x": x})
    _same_under_reference(model, out, {"x": x})


def test_inlining_that_would_fail_the_load_checks_is_undone() -> None:
    """The taken branch hands a [1]-shaped constant to a Range, which onnx's checks refuse
    once it is an initializer (the If's output hid it): the If stays."""
    then = helper.make_graph(
        [helper.make_node("Identity", ["limit"], ["t"])], "then", [], [V("t", I64, [1])]
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["limit2"], ["e"])], "else", [], [V("e", I64, [1])]
    )
    model = _model(
        [
            helper.make_node("If", ["yes"], ["n"], then_branch=then, else_branch=other),
            helper.make_node("Range", ["zero", "n", "one"], ["r"]),
            helper.make_node("Cast", ["r"], ["rf"], to=F),
            helper.make_node("Add", ["rf", "x"], ["y"]),
        ],
        [V("x", F, [1])],
        [V("y", F, [4])],
        [
            _const("yes", np.array(True)),
            _const("limit", np.array([4], np.int64)),
            _const("limit2", np.array([5], np.int64)),
            _const("zero", np.int64(0)),
            _const("one", np.int64(1)),
        ],
    )
    out, rep = optimize(model, Level.BASIC)
    assert "If" in _ops(out) and not rep.fired("inline_constant_if")
    x = np.ones(1, np.float32)
    want = _unoptimized(model, {"x": x})
    np.testing.assert_array_equal(_unoptimized(out, {"x": x})[0], want[0])


def test_vad_like_keeps_its_if_on_the_sample_rate_and_folds_the_branch_constants() -> None:
    apps = pytest.importorskip("turnout_testbed.apps")
    model = apps.vad_like()
    before = _body_ops(model)
    # BASIC: the folding; onnxruntime cannot run the ai.turnout ops the fusions write
    out, _ = optimize(model, Level.BASIC)
    assert _ops(out).count("If") == 1  # on Equal(sr, 16000): sr is fed at run time
    after = _body_ops(out)
    assert before.count("Constant") > 100 and "Constant" not in after
    assert len(after) < len(before) // 2, (len(before), len(after))
    for sr in (16000, 8000):
        feeds = apps.vad_feeds(sr=sr, seed=11)
        _same_as_ort(model, out, feeds, rtol=1e-4, atol=1e-6)


def test_constant_nodes_fold_whatever_their_size_and_are_not_charged() -> None:
    """A Constant node's data is in the model already: it becomes an initializer even over
    the folding cap and budget, while a ConstantOfShape of that size stays a node."""
    big = np.arange(300, dtype=np.float32)
    fill = helper.make_tensor("v", F, [1], [2.0])
    model = _model(
        [
            _constant("k", big),
            helper.make_node("ConstantOfShape", ["n300"], ["c"], value=fill),
            helper.make_node("Mul", ["k", "c"], ["kc"]),
            helper.make_node("Add", ["x", "kc"], ["y"]),
        ],
        [V("x", F, [300])],
        [V("y", F, [300])],
        [_const("n300", np.array([300], np.int64))],
    )
    limits = ResourceLimits(fold_max_elements=100, fold_max_total_bytes=100)
    out, _ = optimize(model, Level.BASIC, limits=limits)
    assert _ops(out) == ["ConstantOfShape", "Mul", "Add"]
    assert [t.name for t in out.graph.initializer if t.name == "k"] == ["k"]
    x = np.random.default_rng(12).standard_normal(300).astype(np.float32)
    _same_as_ort(model, out, {"x": x})
    out, _ = optimize(model, Level.BASIC)  # within the default limits everything folds
    assert _ops(out) == ["Add"]
    _same_as_ort(model, out, {"x": x})


def test_dropout_whose_mask_nobody_reads_goes() -> None:
    model = _model(
        [
            helper.make_node("Dropout", ["x", "ratio"], ["d", "unread_mask"]),
            helper.make_node("Dropout", ["d", "ratio"], ["e", "mask"]),
            helper.make_node("Relu", ["e"], ["y"]),
        ],
        [V("x", F, [2, 3])],
        [V("y", F, [2, 3]), V("mask", TensorProto.BOOL, [2, 3])],
        [_const("ratio", np.float32(0.5))],
    )
    out, _ = optimize(model, Level.BASIC)
    assert _ops(out) == ["Dropout", "Relu"]  # the second one's mask is a graph output
    x = np.random.default_rng(13).standard_normal((2, 3)).astype(np.float32)
    _same_as_ort(model, out, {"x": x})
