"""turnout's onnxruntime-compatible session API, checked side by side against real onnxruntime.

Every test builds a small model, runs it through `turnout` and `onnxruntime`, and expects
turnout to behave as onnxruntime does. Known differences are strict xfails whose reason names
the fix, so they turn into failures (and get unmarked) once fixed.
"""

from __future__ import annotations

import json
import pathlib
import threading
import warnings
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import turnout as ort_t
from turnout.api.capi.onnxruntime_pybind11_state import InvalidArgument as CapiInvalidArgument

ort.set_default_logger_severity(3)  # keep ORT's "initializer in graph inputs" notes quiet

CPU = ["CPUExecutionProvider"]
TINY_CNN = pathlib.Path(ort_t.__file__).parent / "tools" / "models" / "tiny_cnn.onnx"
X1 = np.array([[-5.0, 1.0, 2.0]], np.float32)


def _model(nodes, inputs, outputs, inits=(), opset=17, ml=False, **kw: Any) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        kw.pop("graph_name", "g"),
        inputs,
        outputs,
        list(inits),
        doc_string=kw.pop("graph_doc", ""),
    )
    opsets = [helper.make_opsetid("", opset)]
    if ml:
        opsets.append(helper.make_opsetid("ai.onnx.ml", 3))
    return helper.make_model(g, opset_imports=opsets, ir_version=8, **kw)


def add_relu_neg() -> onnx.ModelProto:
    """Y = Relu(X + B), Z = -X; B is a (non-overridable) initializer."""
    return _model(
        [
            helper.make_node("Add", ["X", "B"], ["S"], name="add0"),
            helper.make_node("Relu", ["S"], ["Y"], name="relu0"),
            helper.make_node("Neg", ["X"], ["Z"], name="neg0"),
        ],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", 3]),
        ],
        [helper.make_tensor("B", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])],
    )


def both(model: onnx.ModelProto, so_t=None, so_o=None, **kw: Any):
    data = model.SerializeToString()
    return (
        ort_t.InferenceSession(data, so_t, providers=CPU, **kw),
        ort.InferenceSession(data, so_o, providers=CPU, **kw),
    )


def args(nodeargs) -> list[tuple[str, list[Any], str]]:
    return [(a.name, list(a.shape), a.type) for a in nodeargs]


def assert_same(got, want, rtol=1e-5, atol=1e-6) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# -- loading and providers ----------------------------------------------------------------------


@pytest.mark.parametrize("form", ["str", "path", "bytes", "proto"])
def test_model_sources_run_tiny_cnn_like_ort(form: str) -> None:
    src = {
        "str": str(TINY_CNN),
        "path": TINY_CNN,
        "bytes": TINY_CNN.read_bytes(),
        "proto": onnx.load(TINY_CNN),
    }[form]
    sess = ort_t.InferenceSession(src, providers=CPU)
    ref = ort.InferenceSession(str(TINY_CNN), providers=CPU)
    x = np.random.default_rng(0).standard_normal((3, 1, 28, 28)).astype(np.float32)
    assert args(sess.get_inputs()) == args(ref.get_inputs())
    assert args(sess.get_outputs()) == args(ref.get_outputs())
    assert_same(sess.run(None, {"image": x}), ref.run(None, {"image": x}), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "kw",
    [
        {"providers": ["CPUExecutionProvider"]},
        {"providers": [("CPUExecutionProvider", {})]},
        {"providers": ["CPUExecutionProvider"], "provider_options": [{}]},
    ],
    ids=["names", "tuples", "provider_options"],
)
def test_provider_forms(kw: dict[str, Any]) -> None:
    data = add_relu_neg().SerializeToString()
    sess, ref = ort_t.InferenceSession(data, **kw), ort.InferenceSession(data, **kw)
    assert sess.get_providers() == ref.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_provider_options() == ref.get_provider_options()
    assert_same(sess.run(None, {"X": X1}), ref.run(None, {"X": X1}))


def test_default_providers_and_module_functions() -> None:
    sess = ort_t.InferenceSession(add_relu_neg().SerializeToString())
    assert sess.get_providers()[-1] == "CPUExecutionProvider"
    assert "CPUExecutionProvider" in ort_t.get_available_providers()
    assert set(ort_t.get_available_providers()) <= set(ort_t.get_all_providers())
    assert ort_t.get_device() == ort.get_device() == "CPU"
    assert ort_t.get_version_string() == ort_t.__version__
    assert isinstance(ort_t.get_build_info(), str)


def test_unavailable_provider_falls_back_to_cpu_like_ort() -> None:
    data = add_relu_neg().SerializeToString()
    wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    with pytest.warns(UserWarning):
        ref = ort.InferenceSession(data, providers=wanted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ort_t.InferenceSession(data, providers=wanted)
    assert sess.get_providers() == ref.get_providers()


def test_set_providers_rebuilds_and_keeps_running() -> None:
    sess, ref = both(add_relu_neg())
    for providers in (["CPUExecutionProvider"], [("CPUExecutionProvider", {})], None):
        sess.set_providers(providers)
        ref.set_providers(providers)
        assert sess.get_providers() == ref.get_providers()
        assert_same(sess.run(["Y"], {"X": X1}), ref.run(["Y"], {"X": X1}))


# -- running ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "names", [None, [], ["Y"], ["Z"], ["Z", "Y"], ("Y",)], ids=lambda n: repr(n)
)
def test_run_output_subsets(names) -> None:
    sess, ref = both(add_relu_neg())
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    assert_same(sess.run(names, {"X": x}), ref.run(names, {"X": x}))


@pytest.mark.parametrize(
    "feed",
    [[[-1.0, 0.5, 2.0]], [[1, 2, 3], [4, 5, 6]], np.ones((3, 2), np.float32).T],
    ids=["float_list", "int_list", "non_contiguous"],
)
def test_run_accepts_lists_and_non_contiguous_arrays(feed) -> None:
    sess, ref = both(add_relu_neg())
    out = sess.run(None, {"X": feed})
    assert_same(out, ref.run(None, {"X": feed}))
    assert all(o.flags.writeable for o in out)


def test_run_with_ort_values_and_ortvalue_feeds() -> None:
    sess, ref = both(add_relu_neg())
    got = sess.run_with_ort_values(["Z", "Y"], {"X": ort_t.OrtValue.ortvalue_from_numpy(X1)})
    want = ref.run_with_ort_values(["Z", "Y"], {"X": ort.OrtValue.ortvalue_from_numpy(X1)})
    assert all(isinstance(v, ort_t.OrtValue) for v in got)
    for g, w in zip(got, want):
        assert (g.data_type(), g.shape(), g.device_name()) == (
            w.data_type(),
            w.shape(),
            w.device_name(),
        )
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    # an OrtValue is also accepted in a plain run
    assert_same(
        sess.run(None, {"X": ort_t.OrtValue.ortvalue_from_numpy(X1)}), ref.run(None, {"X": X1})
    )


def _run_async(sess, names, feed) -> tuple[Any, Any, str]:
    done = threading.Event()
    box: dict[str, Any] = {}

    def callback(outputs, user_data, err) -> None:
        box.update(outputs=outputs, user_data=user_data, err=err)
        done.set()

    sess.run_async(names, feed, callback, "tag")
    assert done.wait(10), "run_async never called its callback"
    return box["outputs"], box["user_data"], box["err"]


def test_run_async_delivers_outputs() -> None:
    sess, ref = both(add_relu_neg())
    outs, user_data, err = _run_async(sess, ["Y"], {"X": X1})
    want = _run_async(ref, ["Y"], {"X": X1})
    assert user_data == "tag" and err == "" == want[2]
    assert_same(outs, want[0])


@pytest.mark.parametrize(
    "names, feed, needle",
    [(["Y"], {"X": X1.astype(np.float64)}, "double"), (["Q"], {"X": X1}, "Q")],
    ids=["wrong_dtype", "unknown_output"],
)
def test_run_async_reports_errors_as_string(names, feed, needle) -> None:
    outs, user_data, err = _run_async(
        ort_t.InferenceSession(add_relu_neg(), providers=CPU), names, feed
    )
    ref_outs, _, ref_err = _run_async(
        ort.InferenceSession(add_relu_neg().SerializeToString(), providers=CPU), names, feed
    )
    assert ref_err and needle in ref_err and not ref_outs
    assert isinstance(err, str) and needle in err and user_data == "tag"
    assert not outs


def test_run_async_error_outputs_are_an_empty_list_like_ort() -> None:
    sess = ort_t.InferenceSession(add_relu_neg(), providers=CPU)
    outs, _, err = _run_async(sess, ["Q"], {"X": X1})
    assert err and outs == []


# -- metadata -----------------------------------------------------------------------------------


def _seq_in_model() -> onnx.ModelProto:
    seq_i64 = helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.INT64, ["d"])
    )
    return _model(
        [helper.make_node("SequenceLength", ["Q"], ["L"])],
        [helper.make_value_info("Q", seq_i64)],
        [helper.make_tensor_value_info("L", TensorProto.INT64, [])],
    )


def _seq_out_model() -> onnx.ModelProto:
    seq_f = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    return _model(
        [helper.make_node("SplitToSequence", ["A"], ["S"], axis=0)],
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, "k"])],
        [helper.make_value_info("S", seq_f)],
    )


def _overridable_model(in_dims, out_dims) -> onnx.ModelProto:
    """B is an initializer listed among the inputs, so it can be overridden by a feed."""
    return _model(
        [helper.make_node("Add", ["X", "B"], ["Y"])],
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, in_dims),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, out_dims)],
        [helper.make_tensor("B", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])],
    )


NODEARG_MODELS = {
    "symbolic_and_fixed": (add_relu_neg, {"X": X1}),
    "seq_input": (_seq_in_model, {"Q": [np.ones(2, np.int64), np.ones(3, np.int64)]}),
    "seq_output": (_seq_out_model, {"A": np.ones((2, 4), np.float32)}),
    "overridable_initializer": (
        lambda: _overridable_model(["M", "batch", 3], ["M", "batch", 3]),
        None,
    ),
}


@pytest.mark.parametrize("name", list(NODEARG_MODELS))
def test_nodeargs_match_ort(name: str) -> None:
    build, feed = NODEARG_MODELS[name]
    sess, ref = both(build())
    assert args(sess.get_inputs()) == args(ref.get_inputs())
    assert args(sess.get_outputs()) == args(ref.get_outputs())
    assert args(sess.get_overridable_initializers()) == args(ref.get_overridable_initializers())
    if feed is not None:
        got, want = sess.run(None, feed), ref.run(None, feed)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if isinstance(w, list):
                assert_same(g, w)
            else:
                assert_same([g], [w])


def test_overridable_initializer_default_and_fed() -> None:
    sess, ref = both(_overridable_model(["M", "batch", 3], ["M", "batch", 3]))
    x = np.ones((1, 2, 3), np.float32)
    for feed in ({"X": x}, {"X": x, "B": np.full(3, 5.0, np.float32)}):
        assert_same(sess.run(None, feed), ref.run(None, feed))


def test_inferred_unknown_output_dims_are_none_like_ort() -> None:
    sess, ref = both(_overridable_model([None, "batch", 3], [None, None, 3]))
    assert args(sess.get_outputs()) == args(ref.get_outputs())


def test_output_without_shape_loads_like_ort() -> None:
    model = _model(
        [helper.make_node("Relu", ["X"], ["Y"])],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    sess, ref = both(model)
    assert args(sess.get_outputs()) == args(ref.get_outputs())


def test_zipmap_seq_map_types_match_ort() -> None:
    floats = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    seq_map = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.STRING, floats)
    )
    model = _model(
        [
            helper.make_node(
                "ZipMap", ["X"], ["Z"], domain="ai.onnx.ml", classlabels_strings=["a", "b", "c"]
            )
        ],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
        [helper.make_value_info("Z", seq_map)],
        ml=True,
    )
    sess = ort_t.InferenceSession(model, providers=CPU)
    ref = ort.InferenceSession(model.SerializeToString(), providers=CPU)
    assert args(sess.get_outputs()) == args(ref.get_outputs())
    assert sess.get_outputs()[0].type == "seq(map(string,tensor(float)))"
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got, want = sess.run(None, {"X": x})[0], ref.run(None, {"X": x})[0]
    assert got == want


def test_modelmeta_matches_ort() -> None:
    model = _model(
        [helper.make_node("Relu", ["X"], ["Y"])],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])],
        graph_name="gname",
        graph_doc="graph doc",
        producer_name="prod",
        domain="dom",
        model_version=7,
        doc_string="model doc",
    )
    helper.set_model_props(model, {"k": "v", "a": "b"})
    got, want = (s.get_modelmeta() for s in both(model))
    for f in (
        "producer_name",
        "graph_name",
        "domain",
        "description",
        "graph_description",
        "version",
        "custom_metadata_map",
    ):
        assert getattr(got, f) == getattr(want, f), f


# -- SessionOptions -----------------------------------------------------------------------------


@pytest.mark.parametrize("enum_name", ["GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder"])
def test_option_enums_match_ort(enum_name: str) -> None:
    ours, theirs = getattr(ort_t, enum_name), getattr(ort, enum_name)
    assert {k: int(v) for k, v in ours.__members__.items()} == {
        k: int(v) for k, v in theirs.__members__.items()
    }


def test_session_options_fields_are_accepted() -> None:
    so_t, so_o = ort_t.SessionOptions(), ort.SessionOptions()
    for so, mod in ((so_t, ort_t), (so_o, ort)):
        so.graph_optimization_level = mod.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.intra_op_num_threads = 2
        so.inter_op_num_threads = 1
        so.execution_mode = mod.ExecutionMode.ORT_PARALLEL
        so.log_severity_level = 3
    sess, ref = both(add_relu_neg(), so_t, so_o)
    kept = sess.get_session_options()
    assert kept.graph_optimization_level == ort_t.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert (kept.intra_op_num_threads, kept.inter_op_num_threads, kept.log_severity_level) == (
        2,
        1,
        3,
    )
    assert kept.execution_mode == ort_t.ExecutionMode.ORT_PARALLEL
    assert_same(sess.run(None, {"X": X1}), ref.run(None, {"X": X1}))


def test_session_config_entries() -> None:
    for so in (ort_t.SessionOptions(), ort.SessionOptions()):
        so.add_session_config_entry("session.custom_key", "42")
        assert so.get_session_config_entry("session.custom_key") == "42"
        with pytest.raises(RuntimeError):  # ORT raises RuntimeError; InvalidArgument is one too
            so.get_session_config_entry("session.not_set")


def _profile(tmp_path: pathlib.Path, mod, model: onnx.ModelProto, runs: list[tuple[Any, Any]]):
    so = mod.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / f"{mod.__name__}_prof")
    sess = mod.InferenceSession(model.SerializeToString(), so, providers=CPU)
    for names, ro in runs:
        sess.run(names, {"X": X1}, ro)
    path = sess.end_profiling()
    assert path.startswith(so.profile_file_prefix) and pathlib.Path(path).is_file()
    trace = json.loads(pathlib.Path(path).read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return sess, [e for e in events if e.get("cat") == "Node"]


def test_profiling_writes_one_node_event_per_node_per_run(tmp_path: pathlib.Path) -> None:
    model = add_relu_neg()
    _, nodes = _profile(tmp_path, ort_t, model, [(None, None), (None, None)])
    assert len(nodes) == 2 * len(model.graph.node)
    assert sorted(e["args"]["op_name"] for e in nodes) == sorted(
        2 * [n.op_type for n in model.graph.node]
    )
    for e in nodes:
        a = e["args"]
        assert a["provider"] == "CPUExecutionProvider"
        assert e["ph"] == "X" and e["dur"] >= 0 and e["name"].endswith("_kernel_time")
        assert [next(iter(d.values())) for d in a["output_type_shape"]] == [[1, 3]]
        assert [next(iter(d.values())) for d in a["input_type_shape"]] in ([[1, 3]], [[1, 3], [3]])


def test_profile_type_shape_keys_match_ort(tmp_path: pathlib.Path) -> None:
    model = add_relu_neg()
    got = {
        e["args"]["op_name"]: e["args"] for e in _profile(tmp_path, ort_t, model, [(None, None)])[1]
    }
    want = {
        e["args"]["op_name"]: e["args"] for e in _profile(tmp_path, ort, model, [(None, None)])[1]
    }
    for op, a in want.items():
        assert got[op]["input_type_shape"] == a["input_type_shape"], op
        assert got[op]["output_type_shape"] == a["output_type_shape"], op


def test_end_profiling_twice_like_ort(tmp_path: pathlib.Path) -> None:
    sess, _ = _profile(tmp_path, ort_t, add_relu_neg(), [(None, None)])
    ref, _ = _profile(tmp_path, ort, add_relu_neg(), [(None, None)])
    assert sess.end_profiling() == ref.end_profiling() == ""


def test_only_execute_path_to_fetches_skips_other_nodes(tmp_path: pathlib.Path) -> None:
    ro = ort_t.RunOptions()
    ro.only_execute_path_to_fetches = True
    ro.logid = "run-42"
    _, nodes = _profile(tmp_path, ort_t, add_relu_neg(), [(["Z"], ro)])
    assert [e["args"]["op_name"] for e in nodes] == ["Neg"]
    sess, ref = both(add_relu_neg())
    ro_o = ort.RunOptions()
    ro_o.only_execute_path_to_fetches = True
    assert_same(sess.run(["Z"], {"X": X1}, ro), ref.run(["Z"], {"X": X1}, ro_o))


def test_optimized_model_filepath_writes_a_loadable_model(tmp_path: pathlib.Path) -> None:
    so = ort_t.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = ort_t.InferenceSession(add_relu_neg(), so, providers=CPU)
    written = onnx.load(so.optimized_model_filepath)
    onnx.checker.check_model(written)
    ref = ort.InferenceSession(so.optimized_model_filepath, providers=CPU)
    assert_same(sess.run(None, {"X": X1}), ref.run(None, {"X": X1}))


def test_free_dimension_override_by_name() -> None:
    so_t, so_o = ort_t.SessionOptions(), ort.SessionOptions()
    for so in (so_t, so_o):
        so.add_free_dimension_override_by_name("N", 4)
    sess, ref = both(add_relu_neg(), so_t, so_o)
    assert args(sess.get_inputs()) == args(ref.get_inputs()) == [("X", [4, 3], "tensor(float)")]
    x = np.ones((4, 3), np.float32)
    assert_same(sess.run(None, {"X": x}), ref.run(None, {"X": x}))
    with pytest.raises(ort_t.InvalidArgument, match="'X'"):
        sess.run(None, {"X": X1})
    with pytest.raises(Exception, match="X"):
        ref.run(None, {"X": X1})


def test_free_dimension_override_reaches_outputs_like_ort() -> None:
    so_t, so_o = ort_t.SessionOptions(), ort.SessionOptions()
    for so in (so_t, so_o):
        so.add_free_dimension_override_by_name("N", 4)
    sess, ref = both(add_relu_neg(), so_t, so_o)
    assert args(sess.get_outputs()) == args(ref.get_outputs())


def test_add_initializer_replaces_weights() -> None:
    so_t, so_o = ort_t.SessionOptions(), ort.SessionOptions()
    w = np.array([10.0, 20.0, 30.0], np.float32)
    # ORT keeps only a pointer: the OrtValue must outlive the session (else it segfaults)
    w_t, w_o = ort_t.OrtValue.ortvalue_from_numpy(w), ort.OrtValue.ortvalue_from_numpy(w)
    so_t.add_initializer("B", w_t)
    so_o.add_initializer("B", w_o)
    sess, ref = both(add_relu_neg(), so_t, so_o)
    out = sess.run(["Y"], {"X": X1})
    assert_same(out, ref.run(["Y"], {"X": X1}))
    np.testing.assert_array_equal(out[0], np.maximum(X1 + w, 0))


# -- RunOptions ---------------------------------------------------------------------------------


def test_run_options_fields() -> None:
    sess, ref = both(add_relu_neg())
    for mod, s in ((ort_t, sess), (ort, ref)):
        ro = mod.RunOptions()
        ro.logid = "abc"
        ro.log_severity_level = 3
        ro.log_verbosity_level = 0
        assert (ro.logid, ro.log_severity_level, ro.terminate) == ("abc", 3, False)
        assert_same(s.run(None, {"X": X1}, ro), ref.run(None, {"X": X1}))


def ro_terminated() -> ort_t.RunOptions:
    ro = ort_t.RunOptions()
    ro.terminate = True
    return ro


def test_terminate_set_before_run_raises() -> None:
    sess, ref = both(add_relu_neg())
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(Exception, match="terminate"):
        ref.run(None, {"X": X1}, ro)
    with pytest.raises(ort_t.TurnoutError, match="terminate"):
        sess.run(None, {"X": X1}, ro_terminated())


def test_terminate_raises_fail_like_ort() -> None:
    sess, ref = both(add_relu_neg())
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail):
        ref.run(None, {"X": X1}, ro)
    with pytest.raises(ort_t.Fail):
        sess.run(None, {"X": X1}, ro_terminated())


# -- IO binding ---------------------------------------------------------------------------------


def test_io_binding_cpu_input_and_named_output() -> None:
    sess, ref = both(add_relu_neg())
    results = []
    for mod, s in ((ort_t, sess), (ort, ref)):
        b = s.io_binding()
        b.bind_cpu_input("X", X1)
        b.bind_output("Y")
        s.run_with_iobinding(b)
        outs = b.get_outputs()
        assert len(outs) == 1 and isinstance(outs[0], mod.OrtValue)
        # ORT reuses the output buffer on the next run: copy before running again
        results.append((outs[0].numpy().copy(), b.copy_outputs_to_cpu()))
        b.bind_cpu_input("X", np.array([[1.0, 1.0, 1.0]], np.float32))  # rebind, run again
        s.run_with_iobinding(b)
        results.append((b.get_outputs()[0].numpy(), b.copy_outputs_to_cpu()))
    (a0, a1, b0, b1) = results
    np.testing.assert_array_equal(a0[0], b0[0])
    assert_same(a0[1], b0[1])
    np.testing.assert_array_equal(a1[0], b1[0])
    assert_same(a1[1], b1[1])


def test_io_binding_ortvalues_and_preallocated_output() -> None:
    sess, ref = both(add_relu_neg())
    got = []
    for mod, s in ((ort_t, sess), (ort, ref)):
        b = s.io_binding()
        b.bind_ortvalue_input("X", mod.OrtValue.ortvalue_from_numpy(X1))
        out = mod.OrtValue.ortvalue_from_shape_and_type([1, 3], np.float32)
        b.bind_ortvalue_output("Z", out)
        b.bind_output("Y", "cpu")
        s.run_with_iobinding(b)
        got.append((out.numpy().copy(), [o.numpy() for o in b.get_outputs()]))
        b.clear_binding_outputs()
        b.bind_output("Y")
        s.run_with_iobinding(b)
        got.append((None, b.copy_outputs_to_cpu()))
    np.testing.assert_array_equal(got[0][0], -X1)
    np.testing.assert_array_equal(got[0][0], got[2][0])
    assert_same(got[0][1], got[2][1])
    assert_same(got[1][1], got[3][1])


def test_io_binding_importable_from_capi_like_ort() -> None:
    from onnxruntime.capi.onnxruntime_inference_collection import IOBinding as OrtIOBinding

    from turnout.api.capi.onnxruntime_inference_collection import IOBinding

    assert OrtIOBinding is not None and IOBinding is ort_t.IOBinding


# -- errors -------------------------------------------------------------------------------------

BAD_RUNS = {
    "missing_input": (None, {}, "X"),
    "wrong_dtype": (None, {"X": X1.astype(np.float64)}, "X"),
    "wrong_rank": (None, {"X": np.ones(3, np.float32)}, "X"),
    "wrong_dim": (None, {"X": np.ones((2, 4), np.float32)}, "X"),
    "unknown_input": (None, {"X": X1, "Q": X1}, "Q"),
    "unknown_output": (["Y", "nope"], {"X": X1}, "nope"),
}


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_bad_runs_raise_invalid_argument_naming_the_value(case: str) -> None:
    names, feed, who = BAD_RUNS[case]
    sess, ref = both(add_relu_neg())
    with pytest.raises(Exception, match=who):
        ref.run(names, feed)
    with pytest.raises(ort_t.InvalidArgument, match=f"'{who}'"):
        sess.run(names, feed)
    with pytest.raises(CapiInvalidArgument):
        sess.run(names, feed)
    with pytest.raises(ValueError):  # ORT's missing-input error is a ValueError; ours are too
        sess.run(names, feed)


@pytest.mark.parametrize(
    "src, ours, theirs",
    [
        (b"\x08\x07garbage\xff\xff", ort_t.InvalidProtobuf, "InvalidProtobuf"),
        ("/nonexistent/dir/model.onnx", ort_t.NoSuchFile, "NoSuchFile"),
    ],
    ids=["malformed_bytes", "missing_file"],
)
def test_load_errors(src, ours, theirs) -> None:
    with pytest.raises(getattr(ort.capi.onnxruntime_pybind11_state, theirs)):
        ort.InferenceSession(src, providers=CPU)
    with pytest.raises(ours):
        ort_t.InferenceSession(src, providers=CPU)
    from turnout.api.capi import onnxruntime_pybind11_state as capi

    with pytest.raises(getattr(capi, theirs)):
        ort_t.InferenceSession(src, providers=CPU)


# -- threads ------------------------------------------------------------------------------------


def test_one_session_many_threads() -> None:
    """8 threads x 50 runs on one session, each with its own batch size and values."""
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((3, 5)).astype(np.float32)
    w2 = rng.standard_normal((5, 2)).astype(np.float32)
    model = _model(
        [
            helper.make_node("MatMul", ["X", "W1"], ["H"]),
            helper.make_node("Relu", ["H"], ["R"]),
            helper.make_node("MatMul", ["R", "W2"], ["Y"]),
            helper.make_node("ReduceSum", ["Y"], ["T"], keepdims=0),
        ],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2]),
            helper.make_tensor_value_info("T", TensorProto.FLOAT, []),
        ],
        [onnx.numpy_helper.from_array(w1, "W1"), onnx.numpy_helper.from_array(w2, "W2")],
    )
    sess = ort_t.InferenceSession(model, providers=CPU)
    failures: list[str] = []
    start = threading.Barrier(8)

    def worker(tid: int) -> None:
        r = np.random.default_rng(tid)
        start.wait()
        try:
            check(r, tid)
        except Exception as e:  # surfaced by the assert below, not lost in the thread
            failures.append(f"thread {tid}: {type(e).__name__}: {e}")

    def check(r: np.random.Generator, tid: int) -> None:
        for i in range(50):
            x = r.standard_normal((tid + 1 + i % 3, 3)).astype(np.float32)
            y, t = sess.run(None, {"X": x})
            want = np.maximum(x @ w1, 0) @ w2
            if y.shape != want.shape or not np.allclose(y, want, rtol=1e-5, atol=1e-5):
                failures.append(f"thread {tid} run {i}: Y mismatch")
            elif not np.allclose(t, want.sum(), rtol=1e-4, atol=1e-4):
                failures.append(f"thread {tid} run {i}: T mismatch")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads)
    assert failures == []


VIEW_OPS = {
    "Identity": ([], {}),
    "Reshape": (["shape"], {}),
    "Flatten": ([], {"axis": 1}),
    "Transpose": ([], {"perm": [1, 0]}),
    "Slice": (["starts", "ends"], {}),
    "Squeeze": ([], {}),
    "Split": ([], {"axis": 1, "num_outputs": 1}),
}


@pytest.mark.parametrize("provider", ["CPUExecutionProvider", "NumbaExecutionProvider"])
@pytest.mark.parametrize("op", sorted(VIEW_OPS))
def test_outputs_never_share_memory_with_the_feeds(op: str, provider: str) -> None:
    """Writing to an output must not change the caller's input (once it did for view ops)."""
    if provider not in ort_t.get_all_providers():
        pytest.skip(f"{provider} is not installed")
    extra, attrs = VIEW_OPS[op]
    consts = {
        "shape": np.array([2, 2], np.int64),
        "starts": np.array([0], np.int64),
        "ends": np.array([2], np.int64),
    }
    node = helper.make_node(op, ["x", *extra], ["y", "y2"] if op == "Identity" else ["y"], **attrs)
    inits = [onnx.numpy_helper.from_array(consts[n], n) for n in extra]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output]
    if op == "Identity":  # two outputs: one value, two names
        node = helper.make_node("Identity", ["x"], ["y"])
        second = helper.make_node("Identity", ["x"], ["y2"])
        nodes = [node, second]
    else:
        nodes = [node]
    graph = helper.make_graph(
        nodes,
        "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    sess = ort_t.InferenceSession(model.SerializeToString(), providers=[provider])
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    outs = sess.run(None, {"x": x})
    for out in outs:
        assert out.flags.writeable
        out[...] = -1
    np.testing.assert_array_equal(x, np.arange(4, dtype=np.float32).reshape(2, 2))
    if len(outs) == 2:
        assert not np.shares_memory(outs[0], outs[1])


@pytest.mark.parametrize("model", ["small_classifier", "tiny_cnn"])
def test_one_cpu_session_from_8_threads_matches_single_thread_runs(model: str) -> None:
    """Run for run, bit for bit, what one thread gets (8 x 1000 in benchmarks/thread_stress.py)."""
    from importlib.resources import files

    from turnout.tools.concurrency import run_from_threads
    from turnout_testbed import zoo

    if model == "tiny_cnn":
        data, name, shape = (
            files("turnout.tools.models").joinpath("tiny_cnn.onnx").read_bytes(),
            "image",
            (2, 1, 28, 28),
        )
    else:
        data, name, shape = zoo.small_classifier().SerializeToString(), "x", (3, 32)
    sess = ort_t.InferenceSession(data, providers=CPU)
    rng = np.random.default_rng(3)
    feeds = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)]
    result = run_from_threads(sess, feeds, threads=8, runs=200)
    assert result.clean, result
