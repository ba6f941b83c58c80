"""What onnxruntime's own Python API tests (its `onnxruntime_test_python*.py`, run unchanged
against `import turnout as onnxruntime`) found, one class of failure per test group (issue 29):
provider names and order, build info, config entries, map/sequence/void feeds, sparse constants
as outputs, session options stored in the model.

Where onnxruntime is installed it is the oracle; the models are built here.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.api.values import OrtValueVector
from turnout.graph.errors import InvalidArgument


def _model(nodes, inputs, outputs, *opsets, **kw):  # type: ignore[no-untyped-def]
    ids = [helper.make_opsetid(d, v) for d, v in (opsets or (("", 17),))]
    graph = helper.make_graph(nodes, "g", inputs, outputs, **kw)
    return helper.make_model(graph, opset_imports=ids, ir_version=8).SerializeToString()


def _identity(elem: int, shape: list[int] | None = None) -> bytes:
    return _model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, shape)],
    )


def _ort() -> object:
    return pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")


# -- provider list, build info ---------------------------------------------------------------


def test_get_all_providers_ends_with_cpu() -> None:
    names = turnout.get_all_providers()
    assert names[-1] == "CPUExecutionProvider"
    assert names.count("CPUExecutionProvider") == 1
    assert set(turnout.get_available_providers()) <= set(names)


def test_get_build_info_has_onnxruntimes_marker() -> None:
    info = turnout.get_build_info()
    assert "Build Info" in info  # what onnxruntime's test_get_build_info looks for
    assert turnout.__version__ in info


# -- errors onnxruntime raises: unknown provider, config entries ------------------------------


def test_set_providers_unknown_name_raises_runtime_error() -> None:
    sess = turnout.InferenceSession(_identity(TensorProto.FLOAT, [2]))
    with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
        sess.set_providers(["InvalidProvider"])
    with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
        sess.set_providers(["CPUExecutionProvider", "InvalidProvider"])
    # turnout's aliases and onnxruntime's names of providers not installed are no error
    sess.set_providers(["cpu"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "not available here", as onnxruntime
        sess.set_providers(["TensorrtExecutionProvider"])
    assert sess.get_providers()[-1] == "CPUExecutionProvider"


def test_session_created_with_unknown_provider_falls_back_as_onnxruntime() -> None:
    with pytest.warns(UserWarning, match="InvalidProvider"):
        sess = turnout.InferenceSession(
            _identity(TensorProto.FLOAT, [2]), providers=["InvalidProvider"]
        )
    assert sess.get_providers() == ["CPUExecutionProvider"]


@pytest.mark.parametrize("owner", ["session", "run"])
def test_config_entries_refused_as_onnxruntime_refuses_them(owner: str) -> None:
    """onnxruntime keeps any key of 1..1024 characters and any value up to 8192, and raises
    RuntimeError on reading a key never set; turnout's own `session.turnout.*` keys stay."""
    if owner == "session":
        opts: object = turnout.SessionOptions()
        add, get = opts.add_session_config_entry, opts.get_session_config_entry  # type: ignore[attr-defined]
        text = "SessionOptions"
    else:
        opts = turnout.RunOptions()
        add, get = opts.add_run_config_entry, opts.get_run_config_entry  # type: ignore[attr-defined]
        text = "RunOptions"
    with pytest.raises(RuntimeError, match=f"{text} does not have configuration with key: NOPE"):
        get("NOPE")
    with pytest.raises(RuntimeError, match="Config key is empty or longer than maximum length"):
        add("", "1")
    with pytest.raises(RuntimeError, match="Config key is empty or longer than maximum length"):
        add("k" * 1025, "1")
    with pytest.raises(RuntimeError, match="Config value is longer than maximum length: 8192"):
        add("k", "v" * 8193)
    add("k" * 1024, "v" * 8192)
    add("any.unknown.key", "x")
    add("any.unknown.key", "y")  # overwritten, as onnxruntime does
    assert get("any.unknown.key") == "y"
    if owner == "session":
        add("session.turnout.max_initializer_bytes", "1000")
        assert get("session.turnout.max_initializer_bytes") == "1000"


CONFIG_CALLS = {
    "get unset": lambda o: (
        o.get_session_config_entry
        if hasattr(o, "get_session_config_entry")
        else o.get_run_config_entry
    )("INVALID_KEY"),
    "add empty key": lambda o: (
        o.add_session_config_entry
        if hasattr(o, "add_session_config_entry")
        else o.add_run_config_entry
    )("", "x"),
    "add long value": lambda o: (
        o.add_session_config_entry
        if hasattr(o, "add_session_config_entry")
        else o.add_run_config_entry
    )("k", "x" * 9000),
}


@pytest.mark.parametrize("kind", ["SessionOptions", "RunOptions"])
@pytest.mark.parametrize("call", sorted(CONFIG_CALLS))
def test_config_entry_errors_match_onnxruntime(kind: str, call: str) -> None:
    ort = _ort()
    with pytest.raises(RuntimeError) as want:
        CONFIG_CALLS[call](getattr(ort, kind)())
    with pytest.raises(RuntimeError) as got:
        CONFIG_CALLS[call](getattr(turnout, kind)())
    assert str(got.value).startswith(str(want.value))


def test_invalid_argument_is_a_runtime_error() -> None:
    assert issubclass(InvalidArgument, RuntimeError)


# -- void-typed feeds (onnxruntime's test_input_void, its ML.NET encoder) ----------------------

VOID_FEEDS = {
    "words": np.array([b"must", b"have", b"same", b"size"], dtype=np.void).reshape(2, 2),
    "NULs kept": np.array([b"A\0A\0", b"B\0B\0", b"C\0C\0", b"D\0\0\0"], np.void).reshape(2, 2),
    "UTF-8": np.array(["é".encode() * 2] * 4, np.void).reshape(2, 2),
}


@pytest.mark.parametrize("case", sorted(VOID_FEEDS))
def test_void_feed_for_string_input_reads_as_onnxruntime(case: str) -> None:
    ort = _ort()
    model, x = _identity(TensorProto.STRING, [2, 2]), VOID_FEEDS[case]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = turnout.InferenceSession(model).run(None, {"x": x})
    assert got[0].dtype == want[0].dtype == np.dtype(object)
    assert got[0].tolist() == want[0].tolist()


def test_void_feed_errors_are_typed_and_name_the_input() -> None:
    strings = turnout.InferenceSession(_identity(TensorProto.STRING, [2]))
    with pytest.raises(InvalidArgument, match=r"input 'x'.*not UTF-8"):
        strings.run(None, {"x": np.array([b"\xff\xfe", b"ok"], np.void)})
    floats = turnout.InferenceSession(_identity(TensorProto.FLOAT, [2]))
    # onnxruntime's words: a void array is a string tensor to it
    with pytest.raises(InvalidArgument, match=r"Actual: \(tensor\(string\)\) , expected"):
        floats.run(None, {"x": np.zeros(2, "V4")})
    with pytest.raises(InvalidArgument, match="input 'x': numpy dtype datetime64"):
        floats.run(None, {"x": np.zeros(2, "M8[s]")})
    with pytest.raises(InvalidArgument, match="no ONNX element type"):
        turnout.OrtValue.ortvalue_from_numpy(np.zeros(2, "M8[s]")).data_type()


# -- map- and sequence-typed inputs (onnxruntime's pipeline_vectorize.onnx, sequence models) ---


def _dict_vectorizer() -> bytes:
    """A DictVectorizer + LinearRegressor pipeline over a map(int64, float) input, the shape of
    onnxruntime's pipeline_vectorize.onnx (scikit-learn's DictVectorizer then a regressor)."""
    map_type = helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
    )
    nodes = [
        helper.make_node(
            "DictVectorizer",
            ["float_input"],
            ["v"],
            domain="ai.onnx.ml",
            int64_vocabulary=[0, 1, 2, 3, 4],
        ),
        helper.make_node(
            "LinearRegressor",
            ["v"],
            ["variable1"],
            domain="ai.onnx.ml",
            coefficients=[1.5, -2.0, 0.25, 3.0, 0.5],
            intercepts=[10.0],
        ),
    ]
    return _model(
        nodes,
        [helper.make_value_info("float_input", map_type)],
        [helper.make_tensor_value_info("variable1", TensorProto.FLOAT, [1, 1])],
        ("", 17),
        ("ai.onnx.ml", 1),
    )


MAP_FEED = {0: 25.0, 1: 5.13, 2: 0.0, 3: 0.453, 4: 5.966}
MAP_FEEDS = {
    "python": MAP_FEED,
    "int64 float32": {np.int64(k): np.float32(v) for k, v in MAP_FEED.items()},
    "int64 float64": {np.int64(k): np.float64(v) for k, v in MAP_FEED.items()},
    "int32 float64": {np.int32(k): np.float64(v) for k, v in MAP_FEED.items()},
}


@pytest.mark.parametrize("case", sorted(MAP_FEEDS))
def test_map_feed_runs_as_on_onnxruntime(case: str) -> None:
    ort = _ort()
    model, x = _dict_vectorizer(), MAP_FEEDS[case]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
        None, {"float_input": x}
    )
    sess = turnout.InferenceSession(model)
    assert sess.get_inputs()[0].type == "map(int64,tensor(float))"
    assert sess.get_inputs()[0].shape == []
    np.testing.assert_array_equal(sess.run(None, {"float_input": x})[0], want[0])


def test_map_feed_through_the_backend_is_the_inputs_value() -> None:
    """onnxruntime's backend reads anything but a list as the one input's value: a dict fed to
    a model whose one input is a map is that map, not {input name: value}."""
    ort = _ort()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # onnxruntime reads onnx.version
        import onnxruntime.backend as ort_backend

    from turnout.api import backend

    model = _dict_vectorizer()
    want = ort_backend.prepare(model).run(MAP_FEED)
    got = backend.prepare(model).run(MAP_FEED)
    np.testing.assert_array_equal(got[0], want[0])
    assert ort  # the oracle ran
    # with any other model a dict is still {input name: value}, turnout's convenience
    rep = backend.prepare(_identity(TensorProto.FLOAT, [2]))
    np.testing.assert_array_equal(rep.run({"x": np.ones(2, np.float32)})[0], np.ones(2))


def test_map_feed_with_wrong_keys_or_values_is_refused_as_onnxruntime() -> None:
    sess = turnout.InferenceSession(_dict_vectorizer())
    with pytest.raises(RuntimeError, match="Unexpected key type  <class 'str'>, it cannot be"):
        sess.run(None, {"float_input": {**MAP_FEED, "a": 5.6}})
    with pytest.raises(RuntimeError, match="Key type must be int or string"):
        sess.run(None, {"float_input": {b"a": 5.6}})
    with pytest.raises(RuntimeError, match="Unexpected value type  <class 'str'>"):
        sess.run(None, {"float_input": {0: "x"}})
    with pytest.raises(RuntimeError, match="expected a map"):
        sess.run(None, {"float_input": [MAP_FEED]})


def _sequence_at() -> bytes:
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    return _model(
        [
            helper.make_node("SequenceLength", ["x"], ["n"]),
            helper.make_node("SequenceInsert", ["x", "t"], ["s"]),
        ],
        [
            helper.make_value_info("x", seq),
            helper.make_tensor_value_info("t", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_value_info("s", seq),
        ],
    )


@pytest.mark.parametrize("length", [0, 1, 3])
def test_sequence_feed_runs_as_on_onnxruntime(length: int) -> None:
    ort = _ort()
    model = _sequence_at()
    feeds = {
        "x": [np.full((2, 3), i, np.float32) for i in range(length)],
        "t": np.ones((2, 3), np.float32),
    }
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = turnout.InferenceSession(model).run(None, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    assert len(got[1]) == len(want[1])
    for g, w in zip(got[1], want[1]):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    "x", [[np.zeros(2)], [[1.0, 2.0]], [1.0], (np.zeros(2, np.float32),)], ids=str
)
def test_sequence_feed_onnxruntime_refuses_is_refused(x: object) -> None:
    ort = _ort()
    model = _sequence_at()
    feeds = {"x": x, "t": np.ones(2, np.float32)}
    with pytest.raises(RuntimeError):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(InvalidArgument, match="input 'x'"):
        turnout.InferenceSession(model).run(None, feeds)


# -- session options stored in the model (ORT_LOAD_CONFIG_FROM_MODEL, metadata `ort_config`) ---


def _with_ort_config(config: str) -> bytes:
    model = onnx.load_from_string(_identity(TensorProto.FLOAT, [2]))
    helper.set_model_props(model, {"ort_config": config})
    return model.SerializeToString()


ORT_CONFIG = json.dumps(
    {
        "session_options": {
            "inter_op_num_threads": 5,
            "intra_op_num_threads": 2,
            "graph_optimization_level": 99,
            "enable_profiling": 1,
            "not_read_from_models": 7,
        }
    }
)
OPTION_NAMES = (
    "inter_op_num_threads",
    "intra_op_num_threads",
    "execution_mode",
    "graph_optimization_level",
    "enable_profiling",
)


def _options_seen(mod, model: bytes) -> dict[str, int]:  # type: ignore[no-untyped-def]
    so = mod.SessionOptions()
    so.intra_op_num_threads = 1  # the caller's options: not used when the model's apply
    so.execution_mode = mod.ExecutionMode.ORT_PARALLEL
    sess = mod.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    got = sess.get_session_options()
    seen = {name: int(getattr(got, name)) for name in OPTION_NAMES}
    if got.enable_profiling:
        os.remove(sess.end_profiling())
    return seen


@pytest.mark.parametrize("env", ["1", "0"])
def test_session_options_from_the_model_as_onnxruntime(
    env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ort = _ort()
    monkeypatch.chdir(tmp_path)  # profiles land here
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", env)
    model = _with_ort_config(ORT_CONFIG)
    want = _options_seen(ort, model)
    assert _options_seen(turnout, model) == want
    if env == "1":
        assert want["inter_op_num_threads"] == 5 and want["enable_profiling"] == 1


@pytest.mark.parametrize(
    "config",
    [
        "{not json",
        json.dumps({"session_options": {"intra_op_num_threads": -1}}),
        json.dumps({"session_options": {"execution_mode": "parallel"}}),
        json.dumps({"session_options": {"graph_optimization_level": 7}}),
    ],
)
def test_bad_ort_config_in_the_model_fails_the_session(
    config: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ort = _ort()
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    model = _with_ort_config(config)
    with pytest.raises(Exception):  # noqa: B017  (onnxruntime: RuntimeError, Fail or ...)
        ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(turnout.Fail, match=r"Could not finalize session options.*ort_config"):
        turnout.InferenceSession(model)


def test_load_config_env_var_other_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "yes")
    with pytest.raises(InvalidArgument, match="only supported values"):
        turnout.InferenceSession(_with_ort_config(ORT_CONFIG))


# -- sparse constants as graph outputs (onnxruntime's sparse_initializer_as_output.onnx) ------


def _sparse(values: list[float], indices: list[int], index_dims: list[int], shape: list[int]):  # type: ignore[no-untyped-def]
    v = helper.make_tensor("values", TensorProto.FLOAT, [len(values)], values)
    i = helper.make_tensor("indices", TensorProto.INT64, index_dims, indices)
    return helper.make_sparse_tensor(v, i, shape)


def _sparse_constant_model(spelling: str, declared: str, sparse: object = None) -> bytes:
    """One sparse constant `values` as the graph's output, spelled as onnxruntime's test model
    spells it (`value` holding a sparse tensor), as `sparse_value`, or as a sparse initializer;
    the output declared a sparse or a dense tensor."""
    sp = sparse or _sparse([1.764052, 0.400157, 0.978738], [2, 3, 5], [3], [3, 3])
    out = helper.make_tensor_value_info("values", TensorProto.FLOAT, [3, 3])
    if declared == "sparse":
        out = helper.make_tensor_value_info("values", TensorProto.FLOAT, None)
        out.type.ClearField("tensor_type")
        out.type.sparse_tensor_type.elem_type = TensorProto.FLOAT
        for d in (3, 3):
            out.type.sparse_tensor_type.shape.dim.add().dim_value = d
    if spelling == "initializer":
        sp.values.name = "values"  # type: ignore[attr-defined]
        return _model([], [], [out], ("", 12), sparse_initializer=[sp])
    node = helper.make_node("Constant", [], ["values"], name="Constant", **{spelling: sp})
    return _model([node], [], [out], ("", 12))


def _sparse_facts(st: object) -> tuple[object, ...]:
    """What onnxruntime's tests read of a sparse output, through both of its classes' names."""
    s: Any = st
    return (
        s.format() if callable(s.format) else s.format,
        s.values().tolist(),
        str(s.values().dtype),
        s.values().flags.writeable,
        (s.get_coo_data() if hasattr(s, "get_coo_data") else s.as_coo_view()).indices().tolist(),
        s.dense_shape(),
        s.data_type(),
    )


@pytest.mark.parametrize("declared", ["sparse", "dense"])
@pytest.mark.parametrize("spelling", ["value", "sparse_value", "initializer"])
def test_sparse_constant_output_comes_back_sparse_as_on_onnxruntime(
    spelling: str, declared: str
) -> None:
    ort = _ort()
    model = _sparse_constant_model(spelling, declared)
    want_sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    got_sess = turnout.InferenceSession(model)
    meta = [(o.name, o.type, o.shape) for o in got_sess.get_outputs()]
    assert meta == [(o.name, o.type, o.shape) for o in want_sess.get_outputs()]
    assert meta == [("values", "tensor(float)", [3, 3])]
    (want,), (got,) = want_sess.run(None, {}), got_sess.run(None, {})
    assert isinstance(got, turnout.SparseTensor)
    assert got.format == got.format() == turnout.OrtSparseFormat.ORT_SPARSE_COO  # both spellings
    assert _sparse_facts(got) == _sparse_facts(want)
    (want_v,), (got_v,) = (s.run_with_ort_values(["values"], {}) for s in (want_sess, got_sess))
    assert got_v.is_sparse_tensor() and not got_v.is_tensor()
    assert got_v.data_type() == want_v.data_type() == "sparse_tensor(float)"
    assert _sparse_facts(got_v.as_sparse_tensor()) == _sparse_facts(want_v.as_sparse_tensor())
    # the native session's signature (feeds first), returning an OrtValueVector
    vector = got_sess._sess.run_with_ort_values({}, ["values"], turnout.RunOptions())
    assert isinstance(vector, OrtValueVector) and vector[0].is_sparse_tensor()


SPARSE_AS_STORED = {
    "2-D coordinates": _sparse([1, 2], [0, 1, 2, 0], [2, 2], [3, 3]),
    "an explicit zero": _sparse([1, 0, 2], [1, 3, 5], [3], [3, 3]),
    "2x2": _sparse([1, 2], [0, 1, 1, 0], [2, 2], [2, 2]),
    "empty": _sparse([], [], [0], [3, 3]),
}


@pytest.mark.parametrize("case", sorted(SPARSE_AS_STORED))
def test_sparse_output_is_recomputed_from_the_dense_value_as_onnxruntime_does(case: str) -> None:
    """onnxruntime gives linear indices of the non-zero entries, whatever the model stored."""
    ort = _ort()
    model = _sparse_constant_model("sparse_value", "dense", SPARSE_AS_STORED[case])
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {})
    (got,) = turnout.InferenceSession(model).run(None, {})
    assert _sparse_facts(got) == _sparse_facts(want)


def test_sparse_constant_read_by_a_node_is_dense_and_other_ranks_fail_as_onnxruntime() -> None:
    ort = _ort()
    sp = _sparse([1, 2], [0, 4], [2], [6])
    nodes = [
        helper.make_node("Constant", [], ["c"], value=sp),
        helper.make_node("Identity", ["c"], ["y"]),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "c")]
    model = _model(nodes, [], outs, ("", 13))
    want_sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    got_sess = turnout.InferenceSession(model)
    (want,), (got,) = want_sess.run(["y"], {}), got_sess.run(["y"], {})
    np.testing.assert_array_equal(got, want)
    assert isinstance(got, np.ndarray)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail, match="dimensions: 1"):
        want_sess.run(["c"], {})
    with pytest.raises(turnout.Fail, match=r"output 'c'.*dimensions: 1"):
        got_sess.run(["c"], {})


# -- shared thread pools -----------------------------------------------------------------------


def test_shared_threads_without_global_pools_fail_as_onnxruntime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from turnout.api import environment

    ort = _ort()
    model = _identity(TensorProto.FLOAT, [2])
    so = ort.SessionOptions()
    so.use_per_session_threads = False
    so.log_severity_level = 4
    with pytest.raises(RuntimeError, match="CreateEnvWithGlobalThreadPools"):
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    monkeypatch.setattr(environment, "_pool_sizes", None)
    options = turnout.SessionOptions()
    options.use_per_session_threads = False
    with pytest.raises(turnout.Fail, match="CreateEnvWithGlobalThreadPools"):
        turnout.InferenceSession(model, options)
    monkeypatch.setattr(environment, "_pool_sizes", (1, 1))  # as after set_global_thread_pool_sizes
    (y,) = turnout.InferenceSession(model, options).run(None, {"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(y, [1, 1])
