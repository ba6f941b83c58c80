"""Load-time type checks and run-time feed checks, with onnxruntime as the oracle.

Parity is defined by onnxruntime (shared/DESIGN.md): each case builds a model, asks the
installed onnxruntime what it does with it, and asserts that turnout does the same: it loads
what onnxruntime loads, and refuses what onnxruntime refuses with the exception class of the
same name, in a message that names the node or input at fault. Where onnxruntime raises a plain
RuntimeError (a feed it cannot convert), turnout raises InvalidArgument, a RuntimeError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph import validate
from turnout.graph.errors import Fail, InvalidArgument
from turnout.graph.model import load_model

F, I64, STR = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING
vi = helper.make_tensor_value_info


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    opset: int = 17,
    inits: list[onnx.TensorProto] | None = None,
    value_info: list[onnx.ValueInfoProto] | None = None,
) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits or [], value_info=value_info or [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _ort_outcome(run: Callable[[Any], Any], model: onnx.ModelProto) -> BaseException | None:
    """What onnxruntime raises for `run(session)` (session creation included), None if fine."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of these cases")
    try:
        run(ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]))
    except Exception as e:
        return e
    return None


def _assert_same(
    model: onnx.ModelProto, run: Callable[[Any], Any], names: tuple[str, ...] = ()
) -> None:
    """turnout does with `model` what onnxruntime does; a refusal names each of `names`."""
    want = _ort_outcome(run, model)
    if want is None:
        run(turnout.InferenceSession(model.SerializeToString()))
        return
    with pytest.raises(turnout.graph.errors.TurnoutError) as info:
        run(turnout.InferenceSession(model.SerializeToString()))
    got = info.value
    if type(want).__module__.endswith("onnxruntime_pybind11_state"):
        assert type(got).__name__ == type(want).__name__, (got, want)
    else:  # onnxruntime's Python layer: a plain RuntimeError for a feed it cannot convert
        assert isinstance(got, type(want)) and isinstance(got, InvalidArgument), (got, want)
    for name in names:
        assert repr(name) in str(got) or f"({name})" in str(got), (name, str(got))


def _load(session: Any) -> None:
    """Creating the session is the whole check."""


# ------------------------------------------------------------------ load time: node types
_then_add_outer = helper.make_graph(
    [helper.make_node("Add", ["s", "s"], ["t"], name="inner_add")], "then", [], [vi("t", STR, [2])]
)
_else_identity = helper.make_graph(
    [helper.make_node("Identity", ["s"], ["e"])], "else", [], [vi("e", STR, [2])]
)
_loop_body_add_strings = helper.make_graph(
    [
        helper.make_node("Identity", ["c_in"], ["c_out"]),
        helper.make_node("Add", ["x_in", "x_in"], ["x_out"], name="body_add"),
    ],
    "body",
    [vi("i", I64, []), vi("c_in", TensorProto.BOOL, []), vi("x_in", STR, [2])],
    [vi("c_out", TensorProto.BOOL, []), vi("x_out", STR, [2])],
)
_loop_body_mixed_state = helper.make_graph(
    [
        helper.make_node("Identity", ["c_in"], ["c_out"]),
        helper.make_node("Identity", ["x_in"], ["x_out"]),
        helper.make_node("Identity", ["y_in"], ["y_out"]),
    ],
    "body",
    [vi("i", I64, []), vi("c_in", TensorProto.BOOL, []), vi("x_in", F, [2]), vi("y_in", I64, [2])],
    [vi("c_out", TensorProto.BOOL, []), vi("x_out", F, [2]), vi("y_out", I64, [2])],
)

NODE_CASES = {
    "add_strings": (
        _model(
            [helper.make_node("Add", ["a", "b"], ["c"], name="add1")],
            [vi("a", STR, [2]), vi("b", STR, [2])],
            [vi("c", STR, [2])],
        ),
        ("add1", "a"),
    ),
    "cast_to_string_then_add_under_float_output": (
        _model(
            [
                helper.make_node("Cast", ["a"], ["s"], to=STR, name="cast"),
                helper.make_node("Add", ["s", "s"], ["c"], name="add1"),
            ],
            [vi("a", F, [2])],
            [vi("c", F, [2])],
        ),
        ("add1", "s"),
    ),
    "add_float_int64": (
        _model(
            [helper.make_node("Add", ["a", "b"], ["c"], name="add1")],
            [vi("a", F, [2]), vi("b", I64, [2])],
            [vi("c", TensorProto.DOUBLE, [2])],
        ),
        ("add1", "a", "b"),
    ),
    "unnamed_node_named_by_op_type": (
        _model(
            [helper.make_node("Add", ["a", "b"], ["c"])],
            [vi("a", F, [2]), vi("b", I64, [2])],
            [helper.make_empty_tensor_value_info("c")],
        ),
        ("Add", "b"),
    ),
    "concat_float_int64": (
        _model(
            [helper.make_node("Concat", ["a", "b"], ["c"], axis=0, name="cat")],
            [vi("a", F, [2]), vi("b", I64, [2])],
            [vi("c", F, [4])],
        ),
        ("cat", "b"),
    ),
    "sum_int64_opset8": (
        _model(
            [helper.make_node("Sum", ["a", "b"], ["c"], name="sum")],
            [vi("a", I64, [2]), vi("b", I64, [2])],
            [vi("c", I64, [2])],
            opset=8,
        ),
        ("sum", "a"),
    ),
    "sum_int64_opset13": (
        _model(
            [helper.make_node("Sum", ["a", "b"], ["c"], name="sum")],
            [vi("a", I64, [2]), vi("b", I64, [2])],
            [vi("c", I64, [2])],
            opset=13,
        ),
        ("sum", "a"),
    ),
    "isinf_float16_opset10": (
        _model(
            [helper.make_node("IsInf", ["a"], ["c"], name="isinf")],
            [vi("a", TensorProto.FLOAT16, [2])],
            [vi("c", TensorProto.BOOL, [2])],
            opset=10,
        ),
        ("isinf", "a"),
    ),
    "isinf_float16_opset20_loads": (
        _model(
            [helper.make_node("IsInf", ["a"], ["c"], name="isinf")],
            [vi("a", TensorProto.FLOAT16, [2])],
            [vi("c", TensorProto.BOOL, [2])],
            opset=20,
        ),
        (),
    ),
    "relu_output_declared_int64": (
        _model(
            [helper.make_node("Relu", ["a"], ["c"], name="relu")],
            [vi("a", F, [2])],
            [vi("c", I64, [2])],
        ),
        ("relu", "c"),
    ),
    "relu_value_info_int64": (
        _model(
            [
                helper.make_node("Relu", ["a"], ["b"], name="relu"),
                helper.make_node("Identity", ["b"], ["c"]),
            ],
            [vi("a", F, [2])],
            [vi("c", F, [2])],
            value_info=[vi("b", I64, [2])],
        ),
        ("relu", "b"),
    ),
    "cast_to_string_declared_float": (
        _model(
            [helper.make_node("Cast", ["a"], ["c"], to=STR, name="cast")],
            [vi("a", F, [2])],
            [vi("c", F, [2])],
        ),
        ("cast", "c"),
    ),
    "sequence_into_relu": (
        _model(
            [helper.make_node("Relu", ["q"], ["c"], name="relu")],
            [helper.make_tensor_sequence_value_info("q", F, None)],
            [vi("c", F, None)],
        ),
        ("relu", "q"),
    ),
    "if_branch_adds_outer_strings": (
        _model(
            [
                helper.make_node(
                    "If",
                    ["cond"],
                    ["c"],
                    then_branch=_then_add_outer,
                    else_branch=_else_identity,
                    name="if1",
                )
            ],
            [vi("cond", TensorProto.BOOL, []), vi("s", STR, [2])],
            [vi("c", STR, [2])],
        ),
        ("inner_add", "if1", "s"),
    ),
    "loop_body_adds_strings": (
        _model(
            [helper.make_node("Loop", ["n", "cond", "x"], ["xo"], body=_loop_body_add_strings)],
            [vi("n", I64, []), vi("cond", TensorProto.BOOL, []), vi("x", STR, [2])],
            [vi("xo", STR, [2])],
        ),
        ("body_add", "x_in"),
    ),
    "loop_state_of_mixed_types_loads": (
        _model(
            [
                helper.make_node(
                    "Loop", ["n", "cond", "x", "y"], ["xo", "yo"], body=_loop_body_mixed_state
                )
            ],
            [
                vi("n", I64, []),
                vi("cond", TensorProto.BOOL, []),
                vi("x", F, [2]),
                vi("y", I64, [2]),
            ],
            [vi("xo", F, [2]), vi("yo", I64, [2])],
        ),
        (),
    ),
    "untyped_output_loads": (
        _model(
            [helper.make_node("Relu", ["a"], ["c"])],
            [vi("a", F, [2])],
            [helper.make_empty_tensor_value_info("c")],
        ),
        (),
    ),
}


@pytest.mark.parametrize("case", NODE_CASES)
def test_node_types_as_onnxruntime(case: str) -> None:
    model, names = NODE_CASES[case]
    _assert_same(model, _load, names)


# ------------------------------------------------------------------ load time: declared types
def _relu(inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["a"], ["c"])], inputs, outputs)


def _relu_identity(value_info: onnx.ValueInfoProto) -> onnx.ModelProto:
    return _model(
        [helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Identity", ["b"], ["c"])],
        [vi("a", F, [2])],
        [vi("c", F, [2])],
        value_info=[value_info],
    )


def _no_elem_type(name: str) -> onnx.ValueInfoProto:
    v = vi(name, F, [2])
    v.type.tensor_type.ClearField("elem_type")
    return v


DECLARED_CASES = {
    "input_elem_type_0": (_relu([vi("a", 0, [2])], [vi("c", F, [2])]), ("a",)),
    "output_elem_type_0": (_relu([vi("a", F, [2])], [vi("c", 0, [2])]), ("c",)),
    "output_elem_type_unset": (_relu([vi("a", F, [2])], [_no_elem_type("c")]), ("c",)),
    "used_value_info_elem_type_0": (_relu_identity(vi("b", 0, [2])), ("b",)),
    "used_value_info_sequence_of_undefined": (
        _relu_identity(helper.make_tensor_sequence_value_info("b", 0, None)),
        ("b",),
    ),
    "unused_value_info_elem_type_0_loads": (_relu_identity(vi("zz", 0, [2])), ()),
    "untyped_graph_input": (
        _relu([helper.make_empty_tensor_value_info("a")], [vi("c", F, [2])]),
        ("a",),
    ),
    "untyped_unused_graph_input": (
        _model(
            [helper.make_node("Relu", ["a"], ["c"])],
            [vi("a", F, [2]), helper.make_empty_tensor_value_info("unused")],
            [vi("c", F, [2])],
        ),
        ("unused",),
    ),
}


@pytest.mark.parametrize("case", DECLARED_CASES)
def test_declared_types_as_onnxruntime(case: str) -> None:
    model, names = DECLARED_CASES[case]
    _assert_same(model, _load, names)


def _add_initializer(dims: list[int]) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    del w.dims[:]
    w.dims.extend(dims)
    return _model(
        [helper.make_node("Add", ["a", "w"], ["c"], name="add1")],
        [vi("a", F, [2])],
        [vi("c", F, [2])],
        inits=[w],
    )


def test_negative_initializer_dim_as_onnxruntime() -> None:
    _assert_same(_add_initializer([-1]), _load, ("w",))


def test_ir_version_0_loads_as_in_onnxruntime() -> None:
    model = _relu([vi("a", F, [2])], [vi("c", F, [2])])
    model.ir_version = 0
    _assert_same(model, _load)


def test_type_checks_infer_on_a_light_copy_without_data_propagation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """data_prop computes values (a model can make them huge), and the copy holds no weights."""
    w = numpy_helper.from_array(np.ones((512, 512), np.float32), "w")
    model = _model(
        [helper.make_node("MatMul", ["a", "w"], ["c"])],
        [vi("a", F, [1, 512])],
        [vi("c", F, [1, 512])],
        inits=[w],
    )
    seen: list[tuple[onnx.ModelProto, dict[str, Any]]] = []
    real = onnx.shape_inference.infer_shapes

    def spy(m: onnx.ModelProto, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        seen.append((m, kwargs))
        return real(m, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    validate.check_types(model, "m")
    assert [kwargs.get("strict_mode") for _, kwargs in seen] == [True]  # one pass when it infers
    for copy, kwargs in seen:
        assert kwargs.get("data_prop") is False
        assert not copy.graph.initializer and copy.ByteSize() < 1024


@pytest.mark.parametrize(
    "node, w_shape",
    [("Add", (3,)), ("MatMul", (3, 5))],
    ids=["add-2-vs-3", "matmul-inner-dims"],
)
def test_incompatible_shapes_refused_as_onnxruntime(node: str, w_shape: tuple[int, ...]) -> None:
    """onnxruntime refuses a node whose own shape inference fails (Fail, naming the op)."""
    w = numpy_helper.from_array(np.zeros(w_shape, np.float32), "w")
    a_shape = [2] if node == "Add" else [2, 4]
    model = _model(
        [helper.make_node(node, ["a", "w"], ["c"], name="bad")],
        [vi("a", F, a_shape)],
        [helper.make_empty_tensor_value_info("c")],
        inits=[w],
    )
    _assert_same(model, _load)
    with pytest.raises(Fail, match=rf"op_type:{node}, node name: bad.*Incompatible dimensions"):
        turnout.InferenceSession(model.SerializeToString())


def test_a_declared_output_shape_that_disagrees_loads_as_in_onnxruntime() -> None:
    model = _model(
        [helper.make_node("Relu", ["a"], ["c"])], [vi("a", F, [2, 4])], [vi("c", F, [3, 4])]
    )
    _assert_same(model, _load)


def test_the_loader_runs_the_type_checks() -> None:
    model, _ = NODE_CASES["add_strings"]
    with pytest.raises(turnout.graph.errors.InvalidGraph, match="add1"):
        load_model(model)


# ------------------------------------------------------------------ run time: feeds
def _identity(elem_type: int, shape: list[Any] | None) -> onnx.ModelProto:
    return _model(
        [helper.make_node("Identity", ["a"], ["c"])],
        [vi("a", elem_type, shape)],
        [vi("c", elem_type, None)],
    )


def _feeding(value: Any) -> Callable[[Any], Any]:
    def run(session: Any) -> Any:
        return session.run(None, {"a": value})

    return run


REFUSED_FEEDS = {
    "python_int": (F, [], 1),
    "python_float": (F, [], 1.5),
    "python_bool": (TensorProto.BOOL, [], True),
    "string": (F, [], "1.5"),
    "string_into_string_input": (STR, [], "a"),
    "tuple": (F, [2], (1.0, 2.0)),
    "huge_python_int": (I64, [], 2**70),
    "huge_int_in_list": (I64, [2], [2**70, 1]),
    "negative_int_in_uint8_list": (TensorProto.UINT8, [2], [-1, 2]),
    "words_in_float_list": (F, [2], ["a", "b"]),
    "ragged_list": (F, None, [[1.0, 2.0], [3.0]]),
    "list_of_wrong_rank": (F, [2], [[1.0, 2.0]]),
    "declared_dim_0_fed_2": (F, [0], np.zeros(2, np.float32)),
    "declared_dim_0_fed_2_after_symbol": (F, ["N", 0], np.zeros((2, 3), np.float32)),
    "declared_dim_3_fed_2": (F, [3], np.zeros(2, np.float32)),
    "wrong_dtype_array": (F, [2], np.zeros(2, np.float64)),
}


@pytest.mark.parametrize("case", REFUSED_FEEDS)
def test_refused_feeds_as_onnxruntime(case: str) -> None:
    elem_type, shape, value = REFUSED_FEEDS[case]
    model = _identity(elem_type, shape)
    assert _ort_outcome(_feeding(value), model) is not None, "onnxruntime accepts it now"
    _assert_same(model, _feeding(value), ("a",))


def test_numpy_scalar_feed_refused_as_onnxruntime() -> None:
    _assert_same(_identity(F, []), _feeding(np.float32(1.5)), ("a",))


ACCEPTED_FEEDS = {
    "list": (F, [2], [1, 2]),
    "nested_list": (F, [2, 2], [[1, 2], [3, 4]]),
    "list_of_bools_into_float": (F, [2], [True, False]),
    "float_list_into_int64": (I64, [2], [1.5, 2.5]),
    "float_overflow_in_list_is_inf": (TensorProto.FLOAT16, [2], [1e300, 1.0]),
    "list_into_string_input": (STR, [3], ["a", 1.5, 2]),
    "zero_d_array": (F, [], np.array(1.5, np.float32)),
    "declared_dim_0_fed_0": (F, [0], np.zeros(0, np.float32)),
    "symbolic_dims": (F, ["N", 3], np.zeros((2, 3), np.float32)),
}


@pytest.mark.parametrize("case", ACCEPTED_FEEDS)
def test_accepted_feeds_as_onnxruntime(case: str) -> None:
    elem_type, shape, value = ACCEPTED_FEEDS[case]
    model = _identity(elem_type, shape)
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of these cases")
    with np.errstate(over="ignore"):  # onnxruntime's own conversion warns on overflow
        (want,) = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        ).run(None, {"a": value})
    (got,) = turnout.InferenceSession(model.SerializeToString()).run(None, {"a": value})
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tolist() == want.tolist()
