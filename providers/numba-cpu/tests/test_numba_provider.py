"""NumbaExecutionProvider: official node cases of its compiled ops, fused groups against the CPU
provider on random data, bounds checks, threads, options and the compile cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.engine.provider_creation import create_provider
from turnout.graph.dtypes import elem_type_of
from turnout.graph.errors import FallbackError, InvalidArgument
from turnout.tools.testing import (
    assert_outputs_close,
    cpu_session,
    iter_node_cases,
    one_node_model,
    positional_inputs,
    provider_session,
)
from turnout_numba import cache
from turnout_numba import kernels as _kernels  # noqa: F401 - importing registers them
from turnout_numba.factory import NumbaProviderFactory
from turnout_numba.fusion import GraphIndex, find_groups
from turnout_numba.registry import TABLE

NUMBA_OPS = {op for (domain, op) in TABLE.ops() if not domain}
assert NUMBA_OPS, "no numba kernels registered: the official-case test would be empty"
EXPECTED = NumbaProviderFactory().expected_failures()
CASES = [c for c in iter_node_cases(NUMBA_OPS) if c.name not in EXPECTED]


def _session(model: onnx.ModelProto, **opts: Any) -> turnout.InferenceSession:
    return provider_session(model, "NumbaExecutionProvider", **opts)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_case(case: Any) -> None:
    model = one_node_model(case.node, case.inputs, case.opsets)
    try:
        sess = _session(model, intra_op_num_threads=1)
    except FallbackError as e:  # a decline is allowed; claiming and failing is not
        pytest.skip(f"declined: {e}")
    feeds = {n: v for n, v in zip(case.node.input, positional_inputs(case.node, case.inputs)) if n}
    got = sess.run(None, feeds)
    assert_outputs_close(case.outputs, got, case.rtol, case.atol)


# ------------------------------------------------------------------------------------------
# fused groups vs the CPU provider


def _model(nodes: list[Any], inputs: dict[str, tuple[int, list[int]]], outputs: list[str]) -> Any:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _check_vs_cpu(model: Any, feeds: dict[str, Any], rtol: float = 1e-5, **opts: Any) -> Any:
    sess = _session(model, **opts)
    got = sess.run(None, feeds)
    want = cpu_session(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=1e-6)
    return sess


def _fused_groups(sess: turnout.InferenceSession) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for a in sess.partition_report().assignments:
        if a.source == "fused" and a.group:
            groups.setdefault(a.group, []).append(a.op_type)
    return groups


UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Softsign", "Erf", "Sqrt"]
BINARY = ["Add", "Sub", "Mul", "Max", "Min", "Div"]


@pytest.mark.parametrize("seed", range(6))
def test_random_elementwise_dag_matches_cpu(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shapes = {"x": [3, 4, 5], "y": [4, 1], "z": [5]}
    values = ["x", "y", "z"]
    nodes = []
    for k in range(8):
        if rng.random() < 0.5:
            op = str(rng.choice(UNARY))
            src = str(rng.choice(values))
            if op == "Sqrt":
                nodes.append(helper.make_node("Abs", [src], [f"a{k}"]))
                src = f"a{k}"
            nodes.append(helper.make_node(op, [src], [f"v{k}"]))
        else:
            op = str(rng.choice(BINARY))
            a, b = (str(v) for v in rng.choice(values, 2))
            nodes.append(helper.make_node(op, [a, b], [f"v{k}"]))
        values.append(f"v{k}")
    model = _model(
        nodes, {k: (TensorProto.FLOAT, s) for k, s in shapes.items()}, [values[-1], values[-3]]
    )
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    sess = _check_vs_cpu(model, feeds, rtol=1e-4)
    assert _fused_groups(sess), "connected elementwise nodes must fuse"


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int8, np.int32, np.uint8, np.int64])
def test_fused_chain_dtypes(dtype: Any) -> None:
    et = elem_type_of(np.dtype(dtype))
    nodes = [
        helper.make_node("Add", ["x", "y"], ["s"]),
        helper.make_node("Mul", ["s", "x"], ["p"]),
        helper.make_node("Max", ["p", "y"], ["m"]),
        helper.make_node("Less", ["m", "x"], ["c"]),
        helper.make_node("Where", ["c", "m", "s"], ["out"]),
    ]
    model = _model(nodes, {"x": (et, [6, 7]), "y": (et, [7])}, ["out", "s"])
    rng = np.random.default_rng(0)
    hi = 120 if np.dtype(dtype).kind in "iu" else 3
    x = (rng.random((6, 7)) * hi).astype(dtype)  # int8: sums and products overflow and wrap
    y = (rng.random(7) * hi).astype(dtype)
    sess = _check_vs_cpu(model, {"x": x, "y": y}, rtol=1e-3 if dtype == np.float16 else 1e-6)
    fused = [] if dtype == np.float16 else [["Add", "Mul", "Max", "Less", "Where"]]
    assert list(_fused_groups(sess).values()) == fused  # float16 rounds per op, unfused


def test_group_stays_convex() -> None:
    # Exp -> Transpose (not fusible) -> Add, and Exp -> Relu -> Add: fusing Exp, Relu and Add
    # would need Transpose's result inside the group that produces its input.
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Relu", ["e"], ["r"]),
        helper.make_node("Transpose", ["e"], ["t"], perm=[1, 0]),
        helper.make_node("Add", ["r", "t"], ["y"]),
    ]
    model = _model(nodes, {"x": (TensorProto.FLOAT, [4, 4])}, ["y"])
    x = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
    sess = _check_vs_cpu(model, {"x": x})
    graph = sess._engine.graph
    idx = GraphIndex(graph.nodes, [o.name for o in graph.outputs])
    for group in find_groups(idx, {"Exp_0", "Relu_1", "Add_3"}):
        assert set(group) != {"Exp_0", "Relu_1", "Add_3"}


def test_intermediate_of_smaller_shape_is_exported_with_its_shape() -> None:
    nodes = [
        helper.make_node("Exp", ["b"], ["eb"]),  # shape [5], read outside the group
        helper.make_node("Add", ["x", "eb"], ["y"]),  # shape [3, 5]
    ]
    model = _model(
        nodes, {"x": (TensorProto.FLOAT, [3, 5]), "b": (TensorProto.FLOAT, [5])}, ["y", "eb"]
    )
    rng = np.random.default_rng(2)
    feeds = {"x": rng.random((3, 5), np.float32), "b": rng.random(5, np.float32)}
    sess = _check_vs_cpu(model, feeds)
    assert _fused_groups(sess)


def test_bad_broadcast_is_invalid_argument() -> None:
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Relu", ["s"], ["o"])]
    model = _model(nodes, {"x": (TensorProto.FLOAT, ["n"]), "y": (TensorProto.FLOAT, ["m"])}, ["o"])
    sess = _session(model)
    with pytest.raises(InvalidArgument, match="broadcast"):
        sess.run(None, {"x": np.ones(3, np.float32), "y": np.ones(4, np.float32)})


# ------------------------------------------------------------------------------------------
# kernels: reductions, softmax, layer norm, gather


REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2", "ReduceLogSumExp"]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", [[0], [1, 3], [-1], [0, 2]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_vs_cpu(op: str, axes: list[int], keepdims: int) -> None:
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5)).astype(np.float32)
    sess = _check_vs_cpu(model, {"x": x}, rtol=1e-5, intra_op_num_threads=1)
    assert sess.partition_report().assignments[0].source == "numba"


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_vs_cpu(op: str, axis: int) -> None:
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    model = _model([node], {"x": (TensorProto.FLOAT, [3, 4, 6])}, ["y"])
    x = (np.random.default_rng(4).standard_normal((3, 4, 6)) * 10).astype(np.float32)
    _check_vs_cpu(model, {"x": x}, rtol=1e-5)


def test_layer_norm_vs_cpu() -> None:
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "m", "r"], axis=-2)
    model = _model(
        [node],
        {
            "x": (TensorProto.FLOAT, [2, 3, 4, 5]),
            "s": (TensorProto.FLOAT, [4, 5]),
            "b": (TensorProto.FLOAT, [5]),
        },
        ["y", "m", "r"],
    )
    rng = np.random.default_rng(5)
    feeds = {
        "x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32),
        "s": rng.standard_normal((4, 5)).astype(np.float32),
        "b": rng.standard_normal(5).astype(np.float32),
    }
    _check_vs_cpu(model, feeds, rtol=1e-4)


@pytest.mark.parametrize("op", ["Gather", "GatherElements"])
def test_gather_bad_index_names_the_node(op: str) -> None:
    node = helper.make_node(op, ["x", "i"], ["y"], axis=1, name="my_gather")
    model = _model(
        [node], {"x": (TensorProto.FLOAT16, [3, 4]), "i": (TensorProto.INT64, [3, 2])}, ["y"]
    )
    sess = _session(model)
    x = np.arange(12, dtype=np.float16).reshape(3, 4)
    good = np.array([[0, -1], [3, 2], [1, -4]], np.int64)
    want = cpu_session(model).run(None, {"x": x, "i": good})[0]
    np.testing.assert_array_equal(sess.run(None, {"x": x, "i": good})[0], want)
    for bad in (4, -5, 2**40):
        idx = good.copy()
        idx[1, 1] = bad
        with pytest.raises(InvalidArgument, match="my_gather"):
            sess.run(None, {"x": x, "i": idx})


# ------------------------------------------------------------------------------------------
# provider mechanics


def test_probe_and_options() -> None:
    f = NumbaProviderFactory()
    avail = f.probe()
    assert avail.ok and avail.devices[0].metadata["numba"]
    with pytest.raises(InvalidArgument, match="intra_op_num_threads"):
        create_provider(f, {"intra_op_num_threads": -2})
    with pytest.raises(InvalidArgument, match="fuse"):
        create_provider(f, {"fuse": "maybe"})
    with pytest.raises(InvalidArgument, match="unknown provider option"):
        create_provider(f, {"threads": 2})
    assert turnout.sdk.plugins.registry.find("numba") is not None


def test_thread_count_is_set_per_run_and_restored() -> None:
    import numba

    p = create_provider(NumbaProviderFactory(), {"intra_op_num_threads": 2})
    assert p.ctx.parallel is True
    before = numba.get_num_threads()
    p.on_run_start()
    assert numba.get_num_threads() == p.threads == min(2, numba.config.NUMBA_NUM_THREADS)
    p.on_run_end()
    assert numba.get_num_threads() == before


_ONE_THREAD_SCRIPT = """
import numpy as np, turnout
from numba.np.ufunc import parallel
from onnx import TensorProto, helper
nodes = [helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
info = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [64, 64])
g = helper.make_graph(nodes, "g", [info("x")], [info("y")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
opts = {"intra_op_num_threads": 1}
s = turnout.InferenceSession(m.SerializeToString(), providers=[("NumbaExecutionProvider", opts)])
s.run(None, {"x": np.ones((64, 64), np.float32)})
print("pool started:", parallel._is_initialized)
"""


def test_one_thread_session_is_serial_and_starts_no_numba_threads() -> None:
    """intra_op_num_threads=1: serial kernels, and numba's thread pool is never started (it
    used to start in the first run, which cost that run 10 ms)."""
    p = create_provider(NumbaProviderFactory(), {"intra_op_num_threads": 1})
    assert p.ctx.parallel is False  # kernels compiled without parallel loops
    out = subprocess.run(
        [sys.executable, "-c", _ONE_THREAD_SCRIPT], capture_output=True, text=True, check=True
    )
    assert "pool started: False" in out.stdout, out.stdout + out.stderr


def test_unknown_types_are_not_compiled() -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],  # rank unknown
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    sess = _session(model)
    assert sess.partition_report().assignments[0].source == "numpy"
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))


def test_first_run_compiles_nothing() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["s"]),
        helper.make_node("ReduceSum", ["s"], ["r"], keepdims=1),
        helper.make_node("Sub", ["x", "r"], ["d"]),
        helper.make_node("Softmax", ["d"], ["y"]),
    ]
    model = _model(nodes, {"x": (TensorProto.FLOAT, ["n", 16])}, ["y"])
    sess = _session(model)
    before = {k: len(d.signatures) for k, d in cache._DISPATCHERS.items()}
    sess.run(None, {"x": np.ones((8, 16), np.float32)})
    sess.run(None, {"x": np.ones((2, 16), np.float32)})
    after = {k: len(d.signatures) for k, d in cache._DISPATCHERS.items()}
    assert before == after


_CACHE_SCRIPT = """
import numpy as np, turnout
from onnx import helper, TensorProto as T
n = [helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Tanh", ["s"], ["y"])]
g = helper.make_graph(n, "g", [helper.make_tensor_value_info("x", T.FLOAT, [3])],
                      [helper.make_tensor_value_info("y", T.FLOAT, None)])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
s = turnout.InferenceSession(m.SerializeToString(), providers=["numba"])
y = s.run(None, {"x": np.ones(3, np.float32)})[0]
assert np.allclose(y, np.tanh(2.0)), y
"""


def test_cache_dir_is_keyed_relocatable_and_survives_corruption(tmp_path: Path) -> None:
    env = {**os.environ, "TURNOUT_CACHE_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env, check=True)
    keyed = list((tmp_path / "numba").iterdir())
    assert len(keyed) == 1 and "numba" in keyed[0].name and "turnout_numba" in keyed[0].name
    entries = [p for p in keyed[0].rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert entries, "compiled kernels must be cached on disk"
    for p in entries:
        p.write_bytes(b"garbage")
    for p in keyed[0].rglob("*.py"):
        p.write_text("garbage = (")
    subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env, check=True)


def test_numba_cache_dir_is_recreated_when_removed(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("TURNOUT_CACHE_DIR", str(tmp_path / "c"))
    root = cache.cache_dir()
    assert cache._writable(root) and root.is_dir()
    root.rmdir()
    assert cache._writable(root) and root.is_dir()
    (tmp_path / "c2").write_text("a file where the directory should be")
    monkeypatch.setenv("TURNOUT_CACHE_DIR", str(tmp_path / "c2"))
    assert not cache._writable(cache.cache_dir())
