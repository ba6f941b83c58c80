"""The graph optimizer: every level keeps every model's outputs (node cases, zoo, light
models), the fusions fire where they should, and the fused CPU kernels match their unfused
decompositions."""

from __future__ import annotations

import glob
import os
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.loader import DATA_DIR

from turnout.api.options import SessionOptions
from turnout.api.session import InferenceSession
from turnout.engine.evaluate import optimize
from turnout.graph.errors import InvalidArgument
from turnout.graph.model import load_model
from turnout.optimizer import GraphPass, Level
from turnout.tools.testing import _all_node_cases, assert_outputs_close, normalize_values
from turnout_testbed import zoo

LEVELS = (Level.BASIC, Level.EXTENDED, Level.ALL)


def _session(model: onnx.ModelProto | str, level: int, **kw: Any) -> InferenceSession:
    opts = SessionOptions()
    opts.graph_optimization_level = level
    src = model if isinstance(model, str) else model.SerializeToString()
    return InferenceSession(src, opts, providers=["CPUExecutionProvider"], **kw)


def _same_as_disabled(model: onnx.ModelProto | str, feeds: Any, rtol: float, atol: float) -> None:
    base = _session(model, Level.DISABLE).run(None, feeds)
    for level in LEVELS:
        got = _session(model, level).run(None, feeds)
        assert_outputs_close(base, got, rtol, atol)


# --- every official node case: optimized == unoptimized ----------------------------------------
def _node_cases() -> list[Any]:
    return [pytest.param(c, id=c.name) for c in _all_node_cases()]


@pytest.mark.slow
@pytest.mark.parametrize("case", _node_cases())
def test_node_case_same_at_every_level(case: Any) -> None:
    # a model the optimizer leaves unchanged runs identically; run the changed ones
    changed = {}
    for level in LEVELS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = load_model(case.model)
        out, _ = optimize(loaded, level)
        if out.SerializeToString() != loaded.SerializeToString():
            changed[level] = out
    if not changed:
        return
    for inputs, _expected in case.data_sets:
        feeds = normalize_values(inputs)
        base = _session(case.model, Level.DISABLE)
        names = [i.name for i in base.get_inputs()]
        want = base.run(None, dict(zip(names, feeds)))
        for model in changed.values():
            got = _session(model, Level.DISABLE).run(None, dict(zip(names, feeds)))
            assert_outputs_close(want, got, case.rtol, case.atol)


# --- zoo and light models ----------------------------------------------------------------------
def _bert_feeds(batch: int = 2, seq: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq // 2 :] = 0
    return {"x": rng.standard_normal((batch, seq, 768)).astype(np.float32), "attention_mask": mask}


def _randn(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


ZOO = {
    "mlp": (lambda: zoo.mlp(batch=4), lambda: {"x": _randn(4, 784)}),
    "bert_like": (lambda: zoo.bert_like(layers=2), _bert_feeds),
    "resnet18_like": (lambda: zoo.resnet18_like(size=64), lambda: {"image": _randn(1, 3, 64, 64)}),
    "tiny_ops_chain": (zoo.tiny_ops_chain, lambda: {"x": np.ones((1, 16), np.float32)}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_same_at_every_level(name: str) -> None:
    build, feeds = ZOO[name]
    _same_as_disabled(build(), feeds(), 1e-3, 1e-5)


LIGHT = sorted(glob.glob(os.path.join(DATA_DIR, "light", "light_*.onnx")))


@pytest.mark.slow
@pytest.mark.parametrize("path", LIGHT, ids=[os.path.basename(p)[6:-5] for p in LIGHT])
def test_light_model_same_at_every_level(path: str) -> None:
    shape_of = _session(path, Level.DISABLE).get_inputs()
    feeds = {
        a.name: np.zeros([d if isinstance(d, int) else 1 for d in a.shape], np.float32)
        for a in shape_of
    }
    _same_as_disabled(path, feeds, 1e-3, 1e-7)


# --- fusions fire ------------------------------------------------------------------------------
def test_bert_fusions_fire_through_dynamic_dims() -> None:
    model = zoo.bert_like(layers=2, dynamic=True)
    _, rep = optimize(model, Level.ALL)
    changes = rep.changes()
    for p in (
        "fuse_layer_norm",
        "fuse_gelu",
        "fuse_attention",
        "fuse_matmul_add",
        "fuse_skip_layer_norm",
    ):
        assert changes.get(p, 0) > 0, (p, changes)
    assert rep.ops_after.get("ai.turnout::Attention") == 2
    assert "Softmax" not in rep.ops_after and "Erf" not in rep.ops_after
    assert rep.nodes_after < rep.nodes_before // 3


def test_conv_bn_folding_fires_on_resnets() -> None:
    _, rep = optimize(zoo.resnet18_like(size=32), Level.BASIC)
    assert rep.changes()["fold_conv_bn"] == 20 and "BatchNormalization" not in rep.ops_after
    light = onnx.load(os.path.join(DATA_DIR, "light", "light_resnet50.onnx"))
    _, rep = optimize(light, Level.BASIC)
    assert rep.changes()["fold_conv_bn"] > 0


def test_basic_level_keeps_standard_ops_and_onnxruntime_agrees(tmp_path: Any) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = zoo.mlp(batch=4)
    out, rep = optimize(model, Level.BASIC)
    assert rep.ops_after == {"Gemm": 3, "Relu": 2}
    feeds = ZOO["mlp"][1]()
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = ort.InferenceSession(out.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


# --- session integration -----------------------------------------------------------------------
def test_session_writes_optimized_model_with_external_data(tmp_path: Any) -> None:
    opts = SessionOptions()
    path = tmp_path / "opt.onnx"
    opts.optimized_model_filepath = str(path)
    opts.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", "weights.bin"
    )
    model = zoo.resnet18_like(size=32)
    sess = InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    assert (tmp_path / "weights.bin").stat().st_size > 1_000_000
    saved = onnx.load(str(path), load_external_data=False)
    assert not any(n.op_type == "BatchNormalization" for n in saved.graph.node)
    assert sess.optimization_report().fired("fold_conv_bn")
    feeds = {"image": np.ones((1, 3, 32, 32), np.float32)}
    reloaded = _session(str(path), Level.DISABLE)
    np.testing.assert_allclose(reloaded.run(None, feeds)[0], sess.run(None, feeds)[0], rtol=1e-5)


def test_disable_level_changes_nothing() -> None:
    sess = _session(zoo.mlp(batch=2), Level.DISABLE)
    rep = sess.optimization_report()
    assert rep.results == [] and rep.nodes_after == rep.nodes_before == 8


def test_fusion_respects_the_owning_provider() -> None:
    # a provider ahead of CPU that runs Gemm but not FusedGemm: the activation fusion must not fire
    def no_fused(domain: str, op: str, replaced: tuple[str, ...]) -> bool:
        return domain != "ai.turnout"

    _, rep = optimize(zoo.mlp(batch=2), Level.ALL, supports=no_fused)
    assert not rep.fired("fuse_activation") and rep.ops_after == {"Gemm": 3, "Relu": 2}


def test_overridden_initializers_are_not_folded() -> None:
    model = zoo.resnet18_like(size=32)
    name = next(n.input[1] for n in model.graph.node if n.op_type == "BatchNormalization")
    _, rep = optimize(model, Level.BASIC, keep_initializers=[name])
    assert rep.changes()["fold_conv_bn"] == 19


def test_plugin_pass_runs_at_its_level() -> None:
    seen = []

    def count(g: Any) -> int:
        seen.append(len(g.nodes))
        return 0

    _, rep = optimize(zoo.mlp(batch=2), Level.BASIC, extra_passes=[("counter", "basic", count)])
    assert seen and rep.changes()["counter"] == 0
    seen.clear()
    optimize(
        zoo.mlp(batch=2),
        Level.BASIC,
        extra_passes=[GraphPass("late", Level.EXTENDED, lambda g, c: 0)],
    )
    assert "late" not in rep.changes()


def test_level_names() -> None:
    assert Level.parse("ORT_ENABLE_EXTENDED") == Level.EXTENDED
    assert Level.parse("disable") == Level.DISABLE and Level.parse("ORT_DISABLE_ALL") == 0
    assert Level.parse("all") == Level.ALL and Level.parse(1) == Level.BASIC
    with pytest.raises(ValueError):
        Level.parse("fast")


# --- individual basic passes -------------------------------------------------------------------
def _model(
    nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] = (), opset: int = 17
) -> onnx.ModelProto:  # type: ignore[assignment]
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


F = TensorProto.FLOAT


def test_identity_before_graph_output_keeps_output_name() -> None:
    m = _model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])],
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    out, _rep = optimize(m, Level.BASIC)
    assert [n.op_type for n in out.graph.node] == ["Relu"] and out.graph.node[0].output[0] == "y"
    x = np.array([-1, 2], np.float32)
    np.testing.assert_array_equal(_session(out, 0).run(None, {"x": x})[0], [0, 2])


def test_constant_folding_respects_size_cap() -> None:
    shape = numpy_helper.from_array(np.array([1000], np.int64), "s")
    m = _model(
        [
            helper.make_node("ConstantOfShape", ["s"], ["c"]),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [1000])],
        [helper.make_tensor_value_info("y", F, [1000])],
        [shape],
    )
    out, _ = optimize(m, Level.BASIC, fold_max_elements=100)
    assert [n.op_type for n in out.graph.node] == ["ConstantOfShape", "Add"]
    out, rep = optimize(m, Level.BASIC)
    assert [n.op_type for n in out.graph.node] == ["Add"] and rep.fired("fold_constants")


def test_reshapes_of_constants_fold_without_a_session() -> None:
    """Unsqueeze, Reshape, Flatten and Squeeze of a constant fold to the input in the output's
    shape, as the evaluator (the CPU kernels) computes them, without running one."""
    from turnout.engine.evaluate import evaluate_model
    from turnout.optimizer import optimize as run_passes

    w = np.arange(6, dtype=np.float32)
    axes = numpy_helper.from_array(np.array([0, 2], np.int64), "axes")
    shape = numpy_helper.from_array(np.array([3, 2, 1], np.int64), "shape")
    nodes = [
        helper.make_node("Unsqueeze", ["w", "axes"], ["u"]),
        helper.make_node("Reshape", ["u", "shape"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"], axis=2),
        helper.make_node("Squeeze", ["f"], ["s"]),
        *[helper.make_node("Add", ["x", v], [f"y_{v}"]) for v in ("u", "r", "f", "s")],
    ]
    outputs = [helper.make_tensor_value_info(f"y_{v}", F, None) for v in ("u", "r", "f", "s")]
    m = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [1])],
        outputs,
        [numpy_helper.from_array(w, "w"), axes, shape],
    )
    calls: list[onnx.ModelProto] = []

    def counting(model: onnx.ModelProto) -> list[Any]:
        calls.append(model)
        return evaluate_model(model)

    out, rep = run_passes(m, Level.BASIC, evaluate=counting)
    assert rep.fired("fold_constants") and not calls
    assert [n.op_type for n in out.graph.node] == ["Add"] * 4
    inits = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    got = {n.output[0][2:]: inits[n.input[1]] for n in out.graph.node}  # s may read w now
    want = evaluate_model(
        _model(
            nodes[:4],
            [],
            [helper.make_tensor_value_info(v, F, None) for v in ("u", "r", "f", "s")],
            [numpy_helper.from_array(w, "w"), axes, shape],
        )
    )
    for v, value in zip(("u", "r", "f", "s"), want):
        assert got[v].shape == value.shape and got[v].dtype == value.dtype
        np.testing.assert_array_equal(got[v], value)


def test_shape_folding_on_static_dims_of_a_dynamic_input() -> None:
    idx = numpy_helper.from_array(np.array(1, np.int64), "i")
    m = _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "i"], ["d"]),
            helper.make_node("Cast", ["d"], ["f"], to=F),
            helper.make_node("Mul", ["x", "f"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, ["batch", 3])],
        [helper.make_tensor_value_info("y", F, ["batch", 3])],
        [idx],
    )
    out, _rep = optimize(m, Level.BASIC)
    assert [n.op_type for n in out.graph.node] == ["Mul"]
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(_session(out, 0).run(None, {"x": x})[0], x * 3)


def test_transposes_cancel_through_relu() -> None:
    m = _model(
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
            helper.make_node("Relu", ["t"], ["r"]),
            helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0, 2]),
        ],
        [helper.make_tensor_value_info("x", F, [2, 3, 4])],
        [helper.make_tensor_value_info("y", F, [2, 3, 4])],
    )
    out, _rep = optimize(m, Level.BASIC)
    assert [n.op_type for n in out.graph.node] == ["Relu"] and out.graph.node[0].output[0] == "y"


def test_cse_and_conv_mul_add_folding() -> None:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w")
    s = numpy_helper.from_array(rng.standard_normal((4, 1, 1)).astype(np.float32), "s")
    b = numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "b")
    m = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Mul", ["c", "s"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["r1"]),
            helper.make_node("Relu", ["a"], ["r2"]),
            helper.make_node("Add", ["r1", "r2"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", F, [1, 4, 5, 5])],
        [w, s, b],
    )
    out, rep = optimize(m, Level.BASIC)
    assert [n.op_type for n in out.graph.node] == ["Conv", "Relu", "Add"]
    assert rep.changes()["fold_conv_add_mul"] == 2
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(
        _session(out, 0).run(None, {"x": x})[0],
        _session(m, 0).run(None, {"x": x})[0],
        rtol=1e-5,
        atol=1e-5,
    )


def test_conv_add_of_a_full_tensor_is_kept_and_the_rest_still_folds() -> None:
    # the Add's constant is not per-channel: fold_conv_add_mul declines it and goes on
    # (it used to fail there, and the whole optimization was skipped)
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w")
    k = numpy_helper.from_array(rng.standard_normal((1, 4, 5, 5)).astype(np.float32), "k")
    s = numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "s")
    m = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["c", "k"], ["a"]),
            helper.make_node("Conv", ["a", "w2"], ["c2"], pads=[1, 1, 1, 1]),
            helper.make_node("Mul", ["c2", "s"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", F, [1, 4, 5, 5])],
        [
            w,
            k,
            s,
            numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2"),
        ],
    )
    out, rep = optimize(m, Level.BASIC)
    assert [n.op_type for n in out.graph.node] == ["Conv", "Add", "Conv"]
    assert rep.changes()["fold_conv_add_mul"] == 1
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(
        _session(m, Level.ALL).run(None, {"x": x})[0],
        _session(m, 0).run(None, {"x": x})[0],
        rtol=1e-5,
        atol=1e-5,
    )


def test_conv_bn_folding_matches_float64_arithmetic() -> None:
    rng = np.random.default_rng(2)
    for dt, et in ((np.float32, F), (np.float16, TensorProto.FLOAT16)):
        w = rng.standard_normal((300, 3, 3, 3)).astype(dt)
        p = [rng.uniform(0.5, 2, 300).astype(dt) for _ in range(4)]
        names = ["scale", "bias", "mean", "var"]
        m = _model(
            [
                helper.make_node("Conv", ["x", "w"], ["c"]),
                helper.make_node("BatchNormalization", ["c", *names], ["y"], epsilon=1e-3),
            ],
            [helper.make_tensor_value_info("x", et, [1, 3, 4, 4])],
            [helper.make_tensor_value_info("y", et, [1, 300, 2, 2])],
            [numpy_helper.from_array(w, "w")]
            + [numpy_helper.from_array(v, n) for v, n in zip(p, names)],
        )
        out, rep = optimize(m, Level.BASIC)
        assert rep.changes()["fold_conv_bn"] == 1
        got = numpy_helper.to_array(
            next(t for t in out.graph.initializer if t.name == out.graph.node[0].input[1])
        )
        scale, _, _, var = (v.astype(np.float64) for v in p)
        eps = float(np.float32(1e-3))  # as the attribute stores it
        factor = (scale / np.sqrt(var + eps)).reshape(300, 1, 1, 1)
        np.testing.assert_array_equal(got, (w.astype(np.float64) * factor).astype(dt))


# --- fused kernels vs their decompositions -----------------------------------------------------
def _fused_vs_unfused(model: onnx.ModelProto, feeds: dict[str, Any], op: str) -> None:
    fused, _ = optimize(model, Level.ALL)
    assert any(n.op_type == op and n.domain == "ai.turnout" for n in fused.graph.node), [
        n.op_type for n in fused.graph.node
    ]
    want = _session(model, Level.DISABLE).run(None, feeds)
    got = _session(fused, Level.DISABLE).run(None, feeds)
    assert_outputs_close(want, got, 1e-4, 1e-5)


@pytest.mark.parametrize("act", ["Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "Clip"])
def test_fused_conv_and_gemm_kernels(act: str) -> None:
    rng = np.random.default_rng(0)
    attrs = {"alpha": 0.2} if act == "LeakyRelu" else {}
    extra = ["lo", "hi"] if act == "Clip" else []
    inits = [
        numpy_helper.from_array(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((75, 5)).astype(np.float32), "gw"),
        numpy_helper.from_array(np.float32(-0.5), "lo"),
        numpy_helper.from_array(np.float32(0.5), "hi"),
    ]
    m = _model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node(act, ["c", *extra], ["a"], **attrs),
            helper.make_node("Flatten", ["a"], ["f"]),
            helper.make_node("Gemm", ["f", "gw"], ["g"]),
            helper.make_node(act, ["g", *extra], ["y"], **attrs),
        ],
        [helper.make_tensor_value_info("x", F, [2, 2, 5, 5])],
        [helper.make_tensor_value_info("y", F, [2, 5])],
        inits,
    )
    _fused_vs_unfused(m, {"x": rng.standard_normal((2, 2, 5, 5)).astype(np.float32)}, "FusedConv")
    fused, _ = optimize(m, Level.ALL)
    assert [n.op_type for n in fused.graph.node] == ["FusedConv", "Flatten", "FusedGemm"]


@pytest.mark.parametrize("tail", ["Relu", "none", "second_reader"])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_residual_add_fuses_into_fused_conv(tail: str, bias: bool) -> None:
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal((2, 2, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(2).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b" if bias else ""], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["x", "c"], ["s"]),  # the residual first: Add commutes
    ]
    if tail == "Relu":
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    elif tail == "second_reader":  # s is read twice: the Relu stays, the Add still fuses
        nodes += [
            helper.make_node("Relu", ["s"], ["r"]),
            helper.make_node("Mul", ["s", "r"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["s"], ["y"]))
    m = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", F, [1, 2, 5, 5])],
        inits,
    )
    _fused_vs_unfused(m, {"x": rng.standard_normal((1, 2, 5, 5)).astype(np.float32)}, "FusedConv")
    fused, rep = optimize(m, Level.ALL)
    assert rep.fired("fuse_conv_add_activation")
    (fc,) = [n for n in fused.graph.node if n.op_type == "FusedConv"]
    assert list(fc.input) == ["x", "w", "b" if bias else "", "x"]
    acts = [a.s.decode() for a in fc.attribute if a.name == "activation"]
    assert acts == (["Relu"] if tail == "Relu" else [])
    assert all(n.op_type != "Add" for n in fused.graph.node)


def test_add_of_two_convs_fuses_once() -> None:
    """ResNet's downsampling block adds two convolutions: one absorbs the Add, the other stays."""
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(rng.standard_normal((2, 2, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((2, 2, 1, 1)).astype(np.float32), "w2"),
    ]
    m = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Conv", ["x", "w2"], ["d"]),
            helper.make_node("Add", ["c", "d"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", F, [1, 2, 5, 5])],
        inits,
    )
    _fused_vs_unfused(m, {"x": rng.standard_normal((1, 2, 5, 5)).astype(np.float32)}, "FusedConv")
    fused, _ = optimize(m, Level.ALL)
    assert sorted(n.op_type for n in fused.graph.node) == ["Conv", "FusedConv"]


def test_conv_add_with_broadcast_is_not_a_residual() -> None:
    """Z must have the conv output's shape: a broadcast Add (a bias) is left to other passes."""
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array(rng.standard_normal((2, 2, 3, 3)).astype(np.float32), "w"),
    ]
    m = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["c", "z"], ["y"]),
        ],
        [
            helper.make_tensor_value_info("x", F, [1, 2, 5, 5]),
            helper.make_tensor_value_info("z", F, [1, 1, 5, 5]),
        ],
        [helper.make_tensor_value_info("y", F, [1, 2, 5, 5])],
        inits,
    )
    fused, rep = optimize(m, Level.ALL)
    assert not rep.fired("fuse_conv_add_activation")
    assert [n.op_type for n in fused.graph.node] == ["Conv", "Add"]


@pytest.mark.parametrize("opset", [14, 20])
def test_gelu_layernorm_attention_kernels(opset: int) -> None:
    model = zoo.bert_like(layers=1, hidden=64, heads=4, opset=opset)
    out, _rep = optimize(model, Level.ALL)
    doms = {f"{n.domain}::{n.op_type}" for n in out.graph.node}
    if opset >= 20:
        assert "::LayerNormalization" in doms  # standard ops where the opset has them
    else:
        assert "ai.turnout::LayerNormalization" in doms
    rng = np.random.default_rng(3)
    mask = np.ones((2, 7), np.int64)
    mask[1, 4:] = 0
    feeds = {"x": rng.standard_normal((2, 7, 64)).astype(np.float32), "attention_mask": mask}
    _fused_vs_unfused(model, feeds, "Attention")


def test_gelu_tanh_form_fuses() -> None:
    consts = {"k": 0.044715, "s": np.sqrt(2 / np.pi), "one": 1.0, "half": 0.5, "three": 3.0}
    c = {k: numpy_helper.from_array(np.float32(v), k) for k, v in consts.items()}
    m = _model(
        [
            helper.make_node("Pow", ["x", "three"], ["p"]),
            helper.make_node("Mul", ["p", "k"], ["pk"]),
            helper.make_node("Add", ["x", "pk"], ["i"]),
            helper.make_node("Mul", ["i", "s"], ["is"]),
            helper.make_node("Tanh", ["is"], ["t"]),
            helper.make_node("Add", ["t", "one"], ["t1"]),
            helper.make_node("Mul", ["x", "half"], ["h"]),
            helper.make_node("Mul", ["h", "t1"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [3, 4])],
        [helper.make_tensor_value_info("y", F, [3, 4])],
        list(c.values()),
    )
    _fused_vs_unfused(m, {"x": np.linspace(-4, 4, 12, dtype=np.float32).reshape(3, 4)}, "Gelu")


def test_fused_kernel_errors() -> None:
    from turnout.tools.testing import run_own_kernel

    node = helper.make_node("Attention", ["q", "k", "v"], ["o"], domain="ai.turnout", num_heads=3)
    q = np.zeros((1, 2, 4), np.float32)
    with pytest.raises(InvalidArgument, match="heads"):
        run_own_kernel(node, [q, q, q], {"": 17, "ai.turnout": 1})
    node = helper.make_node("FusedGemm", ["a", "b"], ["o"], domain="ai.turnout", activation="Nope")
    with pytest.raises(InvalidArgument, match="activation"):
        run_own_kernel(node, [np.zeros((2, 2), np.float32)] * 2, {"": 17, "ai.turnout": 1})


def test_cli_optimize(tmp_path: Any, capsys: Any) -> None:
    from turnout.tools.cli import main

    src = tmp_path / "m.onnx"
    onnx.save(zoo.resnet18_like(size=32), str(src))
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-O", "basic", "-o", str(out), "--report"]) == 0
    text = capsys.readouterr().out
    assert "fold_conv_bn" in text and "BatchNormalization" in text
    assert not any(n.op_type == "BatchNormalization" for n in onnx.load(str(out)).graph.node)
