"""Session creation without serializing the weights: the checker and shape inference see light
copies of the model and must answer exactly as they do for the whole model; the optimizer hands
the arrays it decoded to the IR."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.engine.evaluate import optimize
from turnout.graph.errors import InvalidGraph
from turnout.graph.model import _check_copy, infer_shapes, light_copy, load_model, validate_model
from turnout.optimizer import Level, OptGraph
from turnout_testbed import zoo

F = TensorProto.FLOAT


def _conv_model(big_raw: TensorProto | None = None) -> onnx.ModelProto:
    """Conv (weight over the size limits) -> Reshape by a small constant -> If on an input."""
    rng = np.random.default_rng(0)
    w = big_raw or numpy_helper.from_array(
        rng.standard_normal((64, 32, 3, 3)).astype(np.float32), "w"
    )
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    then = helper.make_graph(
        [helper.make_node("Relu", ["r"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, [1, 2304])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["r"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, [1, 2304])],
    )
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Reshape", ["c", "shape"], ["r"]),
            helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other),
        ],
        "conv_if",
        [
            helper.make_tensor_value_info("x", F, [1, 32, 6, 6]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", F, [1, 2304])],
        [w, shape],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(m)
    return out


def _zoo_models() -> list[Any]:
    return [
        pytest.param(_conv_model(), id="conv_if"),
        pytest.param(zoo.resnet18_like(size=32), id="resnet18_like"),
        pytest.param(zoo.bert_like(layers=1, hidden=64, heads=2, seq=8), id="bert_like"),
    ]


@pytest.mark.parametrize("model", _zoo_models())
def test_light_shape_inference_matches_onnx_on_the_whole_model(model: onnx.ModelProto) -> None:
    for m in (model, optimize(model, Level.ALL)[0]):
        want = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
        got = infer_shapes(_copy(m))
        assert got.graph.SerializeToString(deterministic=True) == want.graph.SerializeToString(
            deterministic=True
        )


def test_light_copy_leaves_the_model_alone() -> None:
    m = _conv_model()
    before = m.SerializeToString(deterministic=True)
    light = light_copy(m, lambda t: None if t.name == "w" else t)
    assert [t.name for t in light.graph.initializer] == ["shape"]
    assert [n.op_type for n in light.graph.node] == ["Conv", "Reshape", "If"]
    assert light.opset_import == m.opset_import and light.ir_version == m.ir_version
    assert m.SerializeToString(deterministic=True) == before


def _checker_message(m: onnx.ModelProto) -> str:
    with pytest.raises(onnx.checker.ValidationError) as info:
        onnx.checker.check_model(m)
    return str(info.value).strip().splitlines()[0]


@pytest.mark.parametrize("cut", [1, 4, 4 * 64 * 32 * 9 - 1])
def test_checker_sees_short_raw_data_of_big_tensors(cut: int) -> None:
    w = numpy_helper.from_array(np.ones((64, 32, 3, 3), np.float32), "w")
    w.raw_data = w.raw_data[:-cut]
    m = _conv_model(w)
    want = _checker_message(m)
    with pytest.raises(InvalidGraph, match="raw_data size") as info:
        load_model(m.SerializeToString())
    assert want in str(info.value)


def test_the_checks_decode_big_weights_once_and_the_session_builds_on_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checking a big raw initializer's length reads its bytes (a copy): those bytes become
    the array the optimizer and the IR use, so no later step reads them again; a tensor whose
    raw data is longer than its shape is left to the decoder, which refuses it."""
    m = _conv_model()
    decoded: dict[str, np.ndarray] = {}
    validate_model(m, "conv_if", decoded)
    assert list(decoded) == ["w"]  # "shape" is small: the checker reads it as it is
    want = numpy_helper.to_array(m.graph.initializer[0])
    assert decoded["w"].dtype == want.dtype and np.array_equal(decoded["w"], want)

    from turnout.graph import tensors

    reads: list[str] = []
    real = tensors._decode_native
    monkeypatch.setattr(tensors, "_decode_native", lambda t: reads.append(t.name) or real(t))
    sess = turnout.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert "w" not in reads
    x = np.random.default_rng(1).standard_normal((1, 32, 6, 6)).astype(np.float32)
    (y,) = sess.run(None, {"x": x, "flag": np.array(True)})
    ref = onnx.reference.ReferenceEvaluator(m).run(None, {"x": x, "flag": np.array(True)})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)

    long = numpy_helper.from_array(np.ones((64, 32, 3, 3), np.float32), "w")
    long.raw_data = long.raw_data + bytes(4)
    decoded = {}
    validate_model(_conv_model(long), "conv_if", decoded)
    assert decoded == {}


def test_checker_still_refuses_two_value_fields_and_string_raw_data() -> None:
    w = numpy_helper.from_array(np.ones((64, 32, 3, 3), np.float32), "w")
    w.float_data.extend([1.0])
    m = _conv_model(w)
    with pytest.raises(InvalidGraph) as info:
        load_model(m)
    assert _checker_message(m) in str(info.value)
    s = TensorProto(name="w", data_type=TensorProto.STRING, dims=[64, 32, 3, 3])
    s.raw_data = bytes(4 * 64 * 32 * 9)
    m = _conv_model(s)
    with pytest.raises(InvalidGraph) as info:
        load_model(m)
    assert _checker_message(m) in str(info.value)


def test_big_model_loads_and_runs_as_before() -> None:
    m = _conv_model()
    stub = _check_copy(m).graph.initializer[0]  # what the checker sees of the weight
    assert stub.name == "w" and list(stub.dims) == [1] and len(stub.raw_data) == 4
    x = np.random.default_rng(1).standard_normal((1, 32, 6, 6)).astype(np.float32)
    sess = turnout.InferenceSession(m.SerializeToString())
    for flag in (True, False):
        (y,) = sess.run(None, {"x": x, "flag": np.array(flag)})
        ref = onnx.reference.ReferenceEvaluator(m).run(None, {"x": x, "flag": np.array(flag)})[0]
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    # the If's output got its type from inference through the light copy
    assert sess.get_outputs()[0].type == "tensor(float)"


@pytest.mark.parametrize("model", _zoo_models())
def test_optimizer_hands_over_arrays_equal_to_the_decoded_protos(model: onnx.ModelProto) -> None:
    values: dict[str, np.ndarray] = {}
    out, _ = optimize(model, Level.ALL, values=values)
    protos = {t.name: t for t in out.graph.initializer}
    assert values and set(values) <= set(protos)
    for name, v in values.items():
        want = numpy_helper.to_array(protos[name])
        assert v.dtype == want.dtype and v.shape == want.shape, name
        assert v.flags.c_contiguous
        np.testing.assert_array_equal(v, want)


def test_optimizer_leaves_its_input_unchanged() -> None:
    m = zoo.resnet18_like(size=32)
    before = m.SerializeToString(deterministic=True)
    out, rep = optimize(m, Level.ALL)
    assert rep.fired("fold_conv_bn")
    assert m.SerializeToString(deterministic=True) == before
    assert len(out.graph.initializer) < len(m.graph.initializer)


def _reference_consumers(nodes: list[onnx.NodeProto]) -> dict[str, list[int]]:
    """OptGraph.consumers as first written: per node, its inputs once, then its nested reads."""

    def sub_reads(node: onnx.NodeProto) -> Iterator[str]:
        for a in node.attribute:
            graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for g in graphs:
                for n in g.node:
                    yield from (x for x in n.input if x)
                    yield from sub_reads(n)
                yield from (o.name for o in g.output)

    out: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for x in dict.fromkeys(n.input):
            if x:
                out.setdefault(x, []).append(i)
        for x in dict.fromkeys(sub_reads(n)):
            out.setdefault(x, []).append(i)
    return out


def test_consumers_lists_each_reader_as_before() -> None:
    m = _conv_model()
    then = m.graph.node[2].attribute[0].g
    then.node.append(helper.make_node("Add", ["c", "c"], ["t2"]))  # a nested read of c
    m.graph.node.append(helper.make_node("Mul", ["r", "r"], ["sq"]))  # one reader, twice
    m.graph.node.append(helper.make_node("Add", ["sq", "c"], ["z"]))
    g = OptGraph(m)
    index = {id(n): i for i, n in enumerate(g.nodes)}
    got = {k: [index[id(n)] for n in v] for k, v in g.consumers().items()}
    assert got == _reference_consumers(g.nodes)
    assert got["c"] == [1, 2, 4] and got["r"] == [2, 3]
    assert g.subgraph_reads() == {"r", "c", "t", "e"}


def test_a_failing_pass_warns_and_the_model_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A crashing pass is a warning (an error under `-W error`), never only a log line."""
    from turnout.graph.errors import OptimizationSkippedWarning
    from turnout.optimizer import base

    def broken(graph: OptGraph, ctx: Any) -> int:
        raise IndexError("a bug in the pass")

    monkeypatch.setattr(
        "turnout.engine.pipeline.graph_passes",
        lambda: [base.GraphPass("broken", Level.BASIC, broken)],
    )
    model = zoo.mlp(batch=2).SerializeToString()
    want = turnout.InferenceSession(model, sess_options=_unoptimized())
    feed = {i.name: np.ones([2, *i.shape[1:]], np.float32) for i in want.get_inputs()}
    with pytest.warns(OptimizationSkippedWarning, match="graph pass 'broken' failed: IndexError"):
        sess = turnout.InferenceSession(model)
    np.testing.assert_array_equal(sess.run(None, feed)[0], want.run(None, feed)[0])


def _unoptimized() -> turnout.SessionOptions:
    opts = turnout.SessionOptions()
    opts.graph_optimization_level = turnout.GraphOptimizationLevel.ORT_DISABLE_ALL
    return opts


BOMB_SCRIPT = """
import resource, sys
import numpy as np
from onnx import TensorProto as T, helper, numpy_helper
import turnout

kind, n = sys.argv[1], int(sys.argv[2])
const = lambda name, v: numpy_helper.from_array(np.array(v), name)
if kind == "ConstantOfShape":
    nodes, inits = [helper.make_node("ConstantOfShape", ["s"], ["c"])], [const("s", [n])]
elif kind == "Range":
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["c"])]
    inits = [const("a", np.float32(0)), const("b", np.float32(n)), const("d", np.float32(1))]
else:  # Expand, Tile
    nodes = [helper.make_node(kind, ["one", "s"], ["c"])]
    inits = [const("one", np.ones(1, np.float32)), const("s", [n])]
nodes.append(helper.make_node("Add", ["c", "x"], ["y"]))
graph = helper.make_graph(
    nodes, kind, [helper.make_tensor_value_info("x", T.FLOAT, [1])],
    [helper.make_tensor_value_info("y", T.FLOAT, None)], inits,
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
turnout.InferenceSession(model.SerializeToString())
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize("kind", ["ConstantOfShape", "Expand", "Tile", "Range"])
def test_a_tiny_model_of_a_huge_constant_loads_without_materializing_it(kind: str) -> None:
    """A ~100-byte model whose constant would hold 2**26 floats (256 MB): session creation
    once took 58 s and 10 GB (onnx's data propagation walked every element, constant folding
    evaluated it). Creation must not grow memory by anything near the tensor's size."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", BOMB_SCRIPT, kind, str(2**26)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    grown_mb = int(done.stdout.split()[-1])
    assert grown_mb < 128, f"session creation grew the process by {grown_mb} MB"


def test_max_tensor_elements_refuses_at_load_naming_the_node() -> None:
    shape = numpy_helper.from_array(np.array([2**20, 2**20], np.int64), "s")
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["c"], name="huge")],
        "g",
        [],
        [helper.make_tensor_value_info("c", F, None)],
        [shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(
        InvalidGraph,
        match=r"node 'huge' \(ConstantOfShape\) produces 'c' with "
        r"1099511627776 elements, over the limit of 4294967296",
    ):
        turnout.InferenceSession(model.SerializeToString())
    opts = turnout.SessionOptions()
    opts.add_session_config_entry("session.turnout.max_tensor_elements", str(2**40))
    sess = turnout.InferenceSession(model.SerializeToString(), sess_options=opts)
    assert sess.get_outputs()[0].name == "c"


def test_resource_limit_entries_must_be_positive_integers() -> None:
    opts = turnout.SessionOptions()
    for bad in ("0", "-5", "many"):
        with pytest.raises(turnout.graph.errors.InvalidArgument, match="fold_max_total_bytes"):
            opts.add_session_config_entry("session.turnout.fold_max_total_bytes", bad)


def test_folding_keeps_no_more_bytes_than_the_budget() -> None:
    """Each folded constant is small, together they are over the budget: the rest stay nodes."""
    nodes, outputs = [], []
    for i in range(4):
        value = helper.make_tensor("v", F, [1], [float(i)])
        nodes.append(helper.make_node("ConstantOfShape", [f"s{i}"], [f"c{i}"], value=value))
        nodes.append(helper.make_node("Add", [f"c{i}", "x"], [f"y{i}"]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", F, [1000]))
    inits = [numpy_helper.from_array(np.array([1000], np.int64), f"s{i}") for i in range(4)]
    x = helper.make_tensor_value_info("x", F, [1])
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], outputs, inits),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    folded, _ = optimize(model, Level.BASIC)
    assert [n.op_type for n in folded.graph.node] == ["Add"] * 4  # the default budget fits all
    from turnout.api.options import ResourceLimits

    budget = ResourceLimits(fold_max_total_bytes=2 * 4000)
    kept, _ = optimize(model, Level.BASIC, limits=budget)
    assert sorted(n.op_type for n in kept.graph.node) == ["Add"] * 4 + ["ConstantOfShape"] * 2
    got = turnout.InferenceSession(kept).run(None, {"x": np.ones(1, np.float32)})
    for i, out in enumerate(got):
        np.testing.assert_array_equal(out, np.full(1000, i + 1, np.float32))
