"""Edge-case models side by side with onnxruntime: what it loads and runs, turnout loads and
runs with the same outputs; what it refuses, turnout refuses with the same exception class.

onnx.checker is stricter than onnxruntime in places (unsorted nodes, the domain spelled
"ai.onnx", an empty graph name, IR 3 initializers outside the graph inputs); onnxruntime is the
anchor. The corpus is built here, so it needs no files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.structure import NAME_IN_MODEL_KEY

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of these cases")

F = TensorProto.FLOAT
vi = helper.make_tensor_value_info
X = vi("x", F, [2, 2])
W = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
XV = np.arange(4, dtype=np.float32).reshape(2, 2)


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[onnx.TensorProto] | None = None,
    opset: int = 17,
    ir: int = 8,
) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def _relu(**kw: Any) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"])], [X], [vi("y", F, [2, 2])], **kw)


def _edited(model: onnx.ModelProto, edit: Callable[[onnx.ModelProto], Any]) -> onnx.ModelProto:
    edit(model)
    return model


def _sparse_constant() -> onnx.ModelProto:
    values = numpy_helper.from_array(np.array([5, 6], np.float32), "v")
    indices = numpy_helper.from_array(np.array([0, 3], np.int64), "i")
    sparse = helper.make_sparse_tensor(values, indices, [2, 2])
    nodes = [
        helper.make_node("Constant", [], ["c"], sparse_value=sparse),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    return _model(nodes, [X], [vi("y", F, [2, 2])])


def _if_reading_an_outer_initializer() -> onnx.ModelProto:
    then = helper.make_graph(
        [helper.make_node("Add", ["w", "w"], ["t"])], "then", [], [vi("t", F, [2, 2])]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["w"], ["e"])], "else", [], [vi("e", F, [2, 2])]
    )
    node = helper.make_node("If", ["b"], ["y"], then_branch=then, else_branch=other)
    return _model([node], [vi("b", TensorProto.BOOL, [])], [vi("y", F, [2, 2])], [W])


def _if_reading_outer_values_with_untyped_outputs() -> onnx.ModelProto:
    """Outputs declared without a shape (onnxruntime loads them) beside branches that read an
    outer input and initializer: the checker must still see the branches in their scope."""
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [vi("t", F, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, None)]
    )
    node = helper.make_node("If", ["b"], ["y"], then_branch=then, else_branch=other)
    return _model([node], [vi("b", TensorProto.BOOL, []), X], [vi("y", F, None)], [W])


def _add_w(**kw: Any) -> onnx.ModelProto:
    return _model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [X], [vi("y", F, [2, 2])], [W], **kw
    )


def _loop_passing_a_value_through() -> onnx.ModelProto:
    """A Loop body whose output is one of its inputs, unchanged (tf2onnx writes these)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["a_in", "w"], ["a_out"]),
        ],
        "body",
        [
            vi("i", TensorProto.INT64, []),
            vi("cond_in", TensorProto.BOOL, []),
            vi("a_in", F, [2]),
            vi("w", F, [2]),
        ],
        [vi("cond_out", TensorProto.BOOL, []), vi("a_out", F, [2]), vi("w", F, [2])],
    )
    node = helper.make_node("Loop", ["m", "", "a", "w0"], ["a_final", "w_final"], body=body)
    inputs = [vi("m", TensorProto.INT64, []), vi("a", F, [2]), vi("w0", F, [2])]
    return _model([node], inputs, [vi("a_final", F, [2]), vi("w_final", F, [2])])


ANON = "F0::anon"


def _anon_constant(out: str, value: Any) -> onnx.NodeProto:
    tensor = numpy_helper.from_array(np.asarray(value), out)
    return helper.make_node("Constant", [], [out], name=ANON, value=tensor)


def _openvino_style_names() -> onnx.ModelProto:
    """Many nodes named "F0::anon", as OpenVINO's exporter names them: Constants (onnxruntime
    makes them initializers before it checks names) beside one other node of that name, in the
    main graph and in If and Loop bodies; "F0::anon~1" is the model's own name, which turnout's
    suffixes step around."""

    def f(v: float) -> np.ndarray:
        return np.full((2, 2), v, np.float32)

    then = helper.make_graph(
        [
            _anon_constant("t0", f(1)),
            _anon_constant("t1", f(2)),
            helper.make_node("Add", ["a1", "t0"], ["t2"], name=ANON),
            helper.make_node("Mul", ["t2", "t1"], ["t3"]),
        ],
        "then",
        [],
        [vi("t3", F, [2, 2])],
    )
    other = helper.make_graph(
        [_anon_constant("e0", f(3)), helper.make_node("Sub", ["a1", "e0"], ["e1"], name=ANON)],
        "else",
        [],
        [vi("e1", F, [2, 2])],
    )
    body = helper.make_graph(
        [
            _anon_constant("one", f(1)),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name=f"{ANON}~1"),
            helper.make_node("Add", ["v_in", "one"], ["v_out"], name=ANON),
        ],
        "body",
        [
            vi("i", TensorProto.INT64, []),
            vi("cond_in", TensorProto.BOOL, []),
            vi("v_in", F, [2, 2]),
        ],
        [vi("cond_out", TensorProto.BOOL, []), vi("v_out", F, [2, 2])],
    )
    nodes = [
        *(_anon_constant(f"c{i}", f(i / 4)) for i in range(12)),
        _anon_constant("trips", np.array(3, np.int64)),
        _anon_constant("yes", np.array(True)),
        helper.make_node("Add", ["x", "c0"], ["a0"], name=ANON),
        helper.make_node("Mul", ["a0", "c1"], ["a1"]),
        helper.make_node("If", ["b"], ["i0"], name="if", then_branch=then, else_branch=other),
        helper.make_node("Loop", ["trips", "yes", "i0"], ["l0"], name="loop", body=body),
        helper.make_node("Sum", ["l0", *(f"c{i}" for i in range(2, 12))], ["y"], name=f"{ANON}~1"),
    ]
    return _model(nodes, [vi("b", TensorProto.BOOL, []), X], [vi("y", F, [2, 2])])


def _branch_nodes_sharing_a_name() -> onnx.ModelProto:
    """Two nodes other than Constants named alike in an If branch: onnxruntime refuses them
    there as in the main graph."""
    then = helper.make_graph(
        [
            helper.make_node("Neg", ["x"], ["t0"], name="n"),
            helper.make_node("Abs", ["t0"], ["t1"], name="n"),
        ],
        "then",
        [],
        [vi("t1", F, [2, 2])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"], name="n")], "else", [], [vi("e", F, [2, 2])]
    )
    node = helper.make_node("If", ["b"], ["y"], then_branch=then, else_branch=other)
    return _model([node], [vi("b", TensorProto.BOOL, []), X], [vi("y", F, [2, 2])])


UNUSED = numpy_helper.from_array(np.ones(3, np.float32), "unused")
X_ONLY = {"x": XV}

# name -> (model, feeds)
CASES: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, Any]]] = {
    **{
        f"ir{ir}-opset{opset}": ((lambda ir=ir, opset=opset: _add_w(ir=ir, opset=opset)), X_ONLY)
        for ir in range(3, 12)
        for opset in (7, 9, 11, 13, 15, 17, 19, 21, 23, 25)
    },
    "unused-initializer": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["y"])], [X], [vi("y", F, [2, 2])], [W, UNUSED]
        ),
        X_ONLY,
    ),
    "untyped-output": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [X],
            [helper.make_empty_tensor_value_info("y")],
        ),
        X_ONLY,
    ),
    "sparse-constant": (_sparse_constant, X_ONLY),
    "if-reading-outer-values-untyped-outputs": (
        _if_reading_outer_values_with_untyped_outputs,
        {"b": np.array(True), "x": XV},
    ),
    "empty-graph-passing-its-input": (lambda: _model([], [X], [vi("x", F, [2, 2])]), X_ONLY),
    "output-is-an-initializer": (lambda: _model([], [], [vi("w", F, [2, 2])], [W]), {}),
    "no-nodes-no-outputs": (lambda: _model([], [X], []), X_ONLY),
    "duplicate-node-names": (
        lambda: _model(
            [
                helper.make_node("Relu", ["x"], ["a"], name="n"),
                helper.make_node("Neg", ["a"], ["y"], name="n"),
            ],
            [X],
            [vi("y", F, [2, 2])],
        ),
        X_ONLY,
    ),
    "constants-sharing-a-node-name-then": (
        _openvino_style_names,
        {"b": np.array(True), "x": XV},
    ),
    "constants-sharing-a-node-name-else": (
        _openvino_style_names,
        {"b": np.array(False), "x": XV},
    ),
    "constants-and-two-nodes-sharing-a-name": (
        lambda: _model(
            [
                _anon_constant("c", XV),
                helper.make_node("Add", ["x", "c"], ["a"], name=ANON),
                helper.make_node("Neg", ["a"], ["y"], name=ANON),
            ],
            [X],
            [vi("y", F, [2, 2])],
        ),
        X_ONLY,
    ),
    "branch-nodes-sharing-a-name": (_branch_nodes_sharing_a_name, {"b": np.array(True), "x": XV}),
    "odd-value-names": (
        lambda: _model(
            [helper.make_node("Relu", ["x y/é:0"], ["ü.1 "])],
            [vi("x y/é:0", F, [2, 2])],
            [vi("ü.1 ", F, [2, 2])],
        ),
        {"x y/é:0": XV},
    ),
    "names-that-differ-by-a-space": (
        lambda: _model([helper.make_node("Relu", ["x"], ["x "])], [X], [vi("x ", F, [2, 2])]),
        X_ONLY,
    ),
    "overridable-initializer-not-fed": (
        lambda: _model(
            [helper.make_node("Add", ["x", "w"], ["y"])],
            [X, vi("w", F, [2, 2])],
            [vi("y", F, [2, 2])],
            [W],
        ),
        X_ONLY,
    ),
    "overridable-initializer-fed": (
        lambda: _model(
            [helper.make_node("Add", ["x", "w"], ["y"])],
            [X, vi("w", F, [2, 2])],
            [vi("y", F, [2, 2])],
            [W],
        ),
        {"x": XV, "w": XV},
    ),
    "unused-graph-input": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["y"])], [X, vi("z", F, [3])], [vi("y", F, [2, 2])]
        ),
        {"x": XV, "z": np.zeros(3, np.float32)},
    ),
    "unused-graph-input-not-fed": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["y"])], [X, vi("z", F, [3])], [vi("y", F, [2, 2])]
        ),
        X_ONLY,
    ),
    "output-listed-twice": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["y"])], [X], [vi("y", F, [2, 2]), vi("y", F, [2, 2])]
        ),
        X_ONLY,
    ),
    "no-opset-import": (lambda: _edited(_relu(), lambda m: m.ClearField("opset_import")), X_ONLY),
    "domain-spelled-ai.onnx": (
        lambda: _edited(
            _relu(),
            lambda m: (
                setattr(m.opset_import[0], "domain", "ai.onnx"),
                setattr(m.graph.node[0], "domain", "ai.onnx"),
            ),
        ),
        X_ONLY,
    ),
    "opset-imported-twice": (
        lambda: _edited(_relu(), lambda m: m.opset_import.append(helper.make_opsetid("", 13))),
        X_ONLY,
    ),
    "empty-optional-input": (
        lambda: _model(
            [helper.make_node("Clip", ["x", "", "m"], ["y"])],
            [X],
            [vi("y", F, [2, 2])],
            [numpy_helper.from_array(np.array(1.5, np.float32), "m")],
        ),
        X_ONLY,
    ),
    "value-info-disagreeing-with-an-initializer": (
        lambda: _edited(_add_w(), lambda m: m.graph.value_info.append(vi("w", F, [3]))),
        X_ONLY,
    ),
    "a-node-output-redefines-an-initializer": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["w"]), helper.make_node("Add", ["x", "w"], ["y"])],
            [X],
            [vi("y", F, [2, 2])],
            [W],
        ),
        X_ONLY,
    ),
    "graph-input-typed-unlike-its-initializer": (
        lambda: _model(
            [helper.make_node("Add", ["x", "w"], ["y"])],
            [X, vi("w", TensorProto.DOUBLE, [2, 2])],
            [vi("y", F, [2, 2])],
            [W],
        ),
        X_ONLY,
    ),
    "zero-size-tensor": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [0, 2])], [vi("y", F, [0, 2])]
        ),
        {"x": np.zeros((0, 2), np.float32)},
    ),
    "string-identity": (
        lambda: _model(
            [helper.make_node("Identity", ["x"], ["y"])],
            [vi("x", TensorProto.STRING, [2])],
            [vi("y", TensorProto.STRING, [2])],
        ),
        {"x": np.array(["a", "b"], object)},
    ),
    "if-reading-an-outer-initializer": (_if_reading_an_outer_initializer, {"b": np.array(True)}),
    "empty-graph-name": (lambda: _edited(_relu(), lambda m: setattr(m.graph, "name", "")), X_ONLY),
    "ir-13-opset-26": (lambda: _relu(ir=13, opset=26), X_ONLY),
    "an-unused-node-output": (
        lambda: _model(
            [
                helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2),
                helper.make_node("Relu", ["a"], ["y"]),
            ],
            [X],
            [vi("y", F, [1, 2])],
            opset=18,
        ),
        X_ONLY,
    ),
    "a-dead-node": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["unused"])],
            [X],
            [vi("y", F, [2, 2])],
        ),
        X_ONLY,
    ),
    "input-without-a-shape": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, None)], [vi("y", F, None)]
        ),
        X_ONLY,
    ),
    "dangling-node-input": (
        lambda: _model([helper.make_node("Relu", ["nope"], ["y"])], [X], [vi("y", F, [2, 2])]),
        X_ONLY,
    ),
    "unknown-op": (
        lambda: _model([helper.make_node("Frobnicate", ["x"], ["y"])], [X], [vi("y", F, [2, 2])]),
        X_ONLY,
    ),
    "unknown-attribute": (
        lambda: _model([helper.make_node("Relu", ["x"], ["y"], foo=1)], [X], [vi("y", F, [2, 2])]),
        X_ONLY,
    ),
    "nodes-out-of-order": (
        lambda: _model(
            [helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])],
            [X],
            [vi("y", F, [2, 2])],
        ),
        X_ONLY,
    ),
    "too-many-node-inputs": (
        lambda: _model([helper.make_node("Relu", ["x", "x"], ["y"])], [X], [vi("y", F, [2, 2])]),
        X_ONLY,
    ),
    "graph-output-nobody-produces": (
        lambda: _model([helper.make_node("Relu", ["x"], ["y"])], [X], [vi("zz", F, [2, 2])]),
        X_ONLY,
    ),
    "negative-dims-mean-any-size": (
        lambda: _model(
            [helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [-1, 2])], [vi("y", F, [-1, 2])]
        ),
        {"x": np.ones((3, 2), np.float32)},
    ),
    "loop-body-passing-a-value-through": (
        _loop_passing_a_value_through,
        {"m": np.array(3), "a": np.zeros(2, np.float32), "w0": np.full(2, 2, np.float32)},
    ),
    "graph-input-listed-twice": (
        lambda: _model([helper.make_node("Relu", ["x"], ["y"])], [X, X], [vi("y", F, [2, 2])]),
        X_ONLY,
    ),
}

# Where turnout deliberately does more than onnxruntime, with the reason.
RUNS_WHERE_ORT_HAS_NO_KERNEL = {
    "opset-1-relu": "onnxruntime has no kernel for Relu-1 (NOT_IMPLEMENTED); turnout runs it",
}


def _outcome(runtime: Any, model: onnx.ModelProto, feeds: dict[str, Any]) -> tuple[str, Any]:
    """("ok", outputs), ("load", exception) or ("run", exception)."""
    try:
        sess = runtime.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
    except Exception as e:
        return "load", e
    try:
        return "ok", [np.asarray(o) for o in sess.run(None, feeds)]
    except Exception as e:
        return "run", e


def _same_class(got: BaseException, want: BaseException) -> bool:
    if type(want).__module__.endswith("onnxruntime_pybind11_state"):
        return type(got).__name__ == type(want).__name__
    return isinstance(got, type(want))  # onnxruntime's Python layer raises builtins


HOST = pytest.param("host", marks=pytest.mark.cpu_means_host)


@pytest.mark.parametrize("cpu", ["numpy", HOST])
@pytest.mark.parametrize("case", sorted(CASES))
def test_edge_case_model_as_onnxruntime(case: str, cpu: str) -> None:
    """Both CPU paths: the numpy kernels, and the host (turnout-numba where it is installed,
    which is what an application asking for CPUExecutionProvider gets)."""
    make, feeds = CASES[case]
    want = _outcome(ort, make(), feeds)
    got = _outcome(turnout, make(), feeds)
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        assert len(got[1]) == len(want[1])
        for g, w in zip(got[1], want[1]):
            assert g.dtype == w.dtype and g.shape == w.shape
            if w.dtype == object:
                assert np.array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-6)
    else:
        assert isinstance(got[1], turnout.graph.errors.TurnoutError), got
        assert _same_class(got[1], want[1]), (got, want)


def test_turnout_runs_what_onnxruntime_has_no_kernel_for() -> None:
    (y,) = turnout.InferenceSession(_relu(opset=1, ir=3).SerializeToString()).run(None, X_ONLY)
    np.testing.assert_array_equal(y, np.maximum(XV, 0))
    assert _outcome(ort, _relu(opset=1, ir=3), X_ONLY)[0] == "load", RUNS_WHERE_ORT_HAS_NO_KERNEL


def test_a_negative_declared_dim_reads_as_unknown() -> None:
    model = CASES["negative-dims-mean-any-size"][0]().SerializeToString()
    assert turnout.InferenceSession(model).get_inputs()[0].shape == [None, 2]


def _no_optimization() -> turnout.SessionOptions:
    so = turnout.SessionOptions()
    so.graph_optimization_level = turnout.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


def test_repeated_node_names_are_suffixed_apart_and_marked() -> None:
    """Every node keeps a name of its own in the partition report, the first of a name keeps
    it bare, and a suffix turnout added is marked as turnout's, in text, JSON and HTML."""
    sess = turnout.InferenceSession(_openvino_style_names().SerializeToString(), _no_optimization())
    report = sess.partition_report()
    suffixed = {
        "": [f"{ANON}~{k}" for k in range(2, 16)],  # ~1 is the model's own name for the Sum
        "if/then": [f"{ANON}~1", f"{ANON}~2"],
        "if/else": [f"{ANON}~1"],
        "loop/body": [f"{ANON}~2"],  # ~1 is the model's own name for the Identity
    }
    graphs = {"": report, **report.subgraphs}
    assert set(graphs) == set(suffixed)
    for key, graph in graphs.items():
        names = [a.node for a in graph.assignments]
        assert len(set(names)) == len(names) and names.count(ANON) == 1, names
        marked = [a.node for a in graph.assignments if a.name_in_model == ANON]
        assert marked == suffixed[key]
    main = {a.node: a.op_type for a in report.assignments}
    assert main[ANON] == "Constant" and main[f"{ANON}~1"] == "Sum"
    assert [main[f"{ANON}~{k}"] for k in range(2, 16)] == ["Constant"] * 13 + ["Add"]
    assert main["Mul_15"] == "Mul"  # an unnamed node goes by op and index, as before
    text = report.to_text()
    assert "[~15 added by turnout]" in text and "[~1 added by turnout]" in text
    assert text.count("added by turnout") == sum(map(len, suffixed.values()))
    assert '"name_in_model": "F0::anon"' in report.to_json()
    assert "~15 added by turnout" in report.to_html()


def test_repeated_node_names_stay_apart_in_the_profile(tmp_path: Path) -> None:
    so = _no_optimization()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "profile")
    sess = turnout.InferenceSession(_openvino_style_names().SerializeToString(), so)
    sess.run(None, {"b": np.array(True), "x": XV})
    with open(sess.end_profiling()) as f:
        events = [e["name"] for e in json.load(f)["traceEvents"] if e["cat"] == "Node"]
    assert len(set(events)) == len(events), events
    constants = [ANON, *(f"{ANON}~{k}" for k in range(2, 15))]
    assert {f"{n}_kernel_time" for n in constants} <= set(events)


def test_explain_marks_the_suffixes_turnout_added(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from turnout.tools.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(_openvino_style_names(), path)
    assert main(["explain", str(path)]) == 0
    text = capsys.readouterr().out
    assert f"{ANON}~15" in text and "[~15 added by turnout]" in text
    assert main(["explain", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    suffixed = [a["node"] for a in report["assignments"] if a["name_in_model"] == ANON]
    assert suffixed == [f"{ANON}~15"]  # the Constants were folded into initializers


def test_the_saved_optimized_model_keeps_the_suffixes(tmp_path: Path) -> None:
    """The optimized model names its nodes apart, records the model's names, and onnxruntime
    runs it to the same outputs."""
    so = turnout.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    feeds = {"b": np.array(False), "x": XV}
    (got,) = turnout.InferenceSession(_openvino_style_names().SerializeToString(), so).run(
        None, feeds
    )
    saved = onnx.load(so.optimized_model_filepath)
    (node,) = [n for n in saved.graph.node if n.op_type == "Add"]
    assert node.name == f"{ANON}~15"
    assert [(p.key, p.value) for p in node.metadata_props] == [(NAME_IN_MODEL_KEY, ANON)]
    assert [n.name for n in saved.graph.node if n.op_type == "Mul"] == [""]  # stays unnamed
    session = ort.InferenceSession(so.optimized_model_filepath, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, feeds)[0], rtol=1e-6)
