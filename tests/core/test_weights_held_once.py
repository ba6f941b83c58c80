"""A first session holds its weights once while its compiled tier builds (issue 27, peak RSS):
the proto it keeps for the build holds no bytes of the weights it decoded, the build's folded
weights are the running tier's arrays, and once the compiled tier is adopted the folded-away
originals are let go.

A fake host provider whose kernel build waits on a gate holds the build where both tiers
exist (its optimizer has run, its kernels are not built yet).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.engine.tiers import WAIT_ENV, stop_all_builds
from turnout.graph.shared_arrays import MIN_BYTES, SharedArrays
from turnout.sdk.provider_options import CPU_NUMPY_ONLY_KEY
from turnout_testbed.gated_host import BUILD_TIMEOUT as WAIT_S
from turnout_testbed.gated_host import Gate, serving_cpu

pytestmark = pytest.mark.cpu_means_host  # the host provider serves CPU requests here

CPU = "CPUExecutionProvider"
C, K = 64, 3  # Conv channels and kernel size: a weight of C*C*K*K float32 (147 KB)
GATE = Gate()


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(WAIT_ENV, raising=False)
    global GATE
    GATE = Gate()
    with serving_cpu(GATE, stop_all_builds):
        yield


def _model() -> onnx.ModelProto:
    """Conv -> BatchNormalization (folded into the Conv's weight) -> Neg (the host's), and a
    second Conv whose weight nothing folds."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((C, C, K, K)).astype(np.float32)
    w2 = rng.standard_normal((C, C, K, K)).astype(np.float32)
    stats = [
        (1 + 0.1 * rng.standard_normal(C)).astype(np.float32),  # scale
        rng.standard_normal(C).astype(np.float32),  # shift
        rng.standard_normal(C).astype(np.float32),  # mean
        (0.5 + rng.random(C)).astype(np.float32),  # variance
    ]
    bn_names = ["scale", "shift", "mean", "var"]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", *bn_names], ["b"], name="bn"),
        helper.make_node("Conv", ["b", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Neg", ["c2"], ["y"], name="neg"),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")]
    inits += [numpy_helper.from_array(v, n) for n, v in zip(bn_names, stats)]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 8, 8])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


WEIGHT_BYTES = 2 * C * C * K * K * 4
X = np.random.default_rng(1).standard_normal((1, C, 8, 8)).astype(np.float32)


def _big(sess: turnout.InferenceSession) -> list[np.ndarray]:
    return [
        a
        for a in sess._engine.graph.initializers.values()
        if isinstance(a, np.ndarray) and a.nbytes >= MIN_BYTES
    ]


def test_both_tiers_hold_the_weights_once(host: None, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    expected = turnout.InferenceSession(str(path), providers=[CPU], sess_options=_numpy_only()).run(
        None, {"x": X}
    )[0]
    sess = turnout.InferenceSession(str(path), providers=[CPU])
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], expected)
    numpy_tier = _big(sess)  # held: their ids stay theirs
    assert len(numpy_tier) == 2  # the folded weight and w2
    assert GATE.entered.wait(WAIT_S), "the compiled tier's build never reached the host"
    # the build optimized the model from the proto the session keeps: no weight bytes in it
    loaded = sess._engine._loaded
    assert loaded is not None
    assert loaded.ByteSize() < WEIGHT_BYTES / 4, "the kept proto holds the weights again"
    GATE.open.set()
    sess._engine.adopt_compiled_tier()
    assert sess.partition_report().tier.tier == "compiled"  # type: ignore[union-attr]
    compiled_tier = _big(sess)
    held = {id(a) for a in numpy_tier}
    assert all(id(a) in held for a in compiled_tier), "each tier folded its own weights"
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], expected)
    # adopted: the proto and the original (unfolded) weight are let go
    assert sess._engine._loaded is None
    assert all(id(a) in {id(b) for b in compiled_tier} for a in sess._engine._decoded.values())


def _numpy_only() -> turnout.SessionOptions:
    so = turnout.SessionOptions()
    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")
    return so


def test_shared_arrays_find_equal_bits_only() -> None:
    a = np.arange(MIN_BYTES, dtype=np.float32)
    shared = SharedArrays([a, np.zeros(3, np.float32)])
    assert len(shared) == 1  # the small one is not indexed
    assert shared.find(a.copy()) is a
    other = a.copy()
    other[-1] = -1  # differs where the key does not look
    assert shared.find(other) is other
    negative_zero = np.zeros(MIN_BYTES, np.float32)
    assert SharedArrays([negative_zero]).find(-negative_zero) is not negative_zero
    assert shared.find(a.astype(np.int32)) is not a  # another type


def test_a_weight_read_by_a_nested_graph_keeps_its_bytes() -> None:
    """An If branch reads an outer weight: bodies are optimized on protos, so that weight
    keeps its data in the session's proto; the top-level reader's result is unchanged."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((MIN_BYTES // 4, 2)).astype(np.float32)  # decoded at load
    n = w.shape[0]
    branch = helper.make_graph(  # the Transposes of the outer constant fold in the body
        [
            helper.make_node("Transpose", ["w"], ["wt"], name="t1", perm=[1, 0]),
            helper.make_node("Transpose", ["wt"], ["ww"], name="t2", perm=[1, 0]),
            helper.make_node("MatMul", ["x", "ww"], ["t"], name="inner"),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 2])],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["m"], ["e"], name="same")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 2])],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="outer"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=other),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, n)).astype(np.float32)
    for level in (turnout.GraphOptimizationLevel.ORT_DISABLE_ALL,
                  turnout.GraphOptimizationLevel.ORT_ENABLE_ALL):  # fmt: skip
        so = turnout.SessionOptions()
        so.graph_optimization_level = level
        sess = turnout.InferenceSession(model.SerializeToString(), so, providers=[CPU])
        for cond in (True, False):
            got = sess.run(None, {"x": x, "cond": np.array(cond)})[0]
            np.testing.assert_allclose(got, x @ w, rtol=1e-5)


def _root(a: np.ndarray) -> object:
    base: object = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


@pytest.mark.parametrize("maps", [64, 0], ids=["mapped", "read-into-array"])
def test_external_weights_are_mapped_not_read(
    tmp_path: Path, maps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A weight in an external file is an array over the mapped file (or, past the maps a
    model may hold, read straight into its array): never read into the proto and decoded
    from there (the two copies the session held until the proto went)."""
    import mmap

    monkeypatch.setattr("turnout.graph.model._MAX_MAPPED_FILES", maps)

    rng = np.random.default_rng(0)
    w = rng.standard_normal((MIN_BYTES // 4, 2)).astype(np.float32)
    b = np.array([0.5, -0.5], np.float32)
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
            helper.make_node("Add", ["m", "b"], ["y"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=64)
    x = rng.standard_normal((1, w.shape[0])).astype(np.float32)
    sess = turnout.InferenceSession(str(path), providers=[CPU])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ w + b, rtol=1e-5)
    root = _root(sess._engine.graph.initializers["w"])
    if maps:
        assert isinstance(root, memoryview) and isinstance(root.obj, mmap.mmap)
    else:  # its own array, not a view of bytes read out of the proto
        assert isinstance(root, np.ndarray) and root.size == w.size
    full = sess._engine.full_model()  # what is saved or compiled still has the weight
    got = {t.name: numpy_helper.to_array(t) for t in full.graph.initializer}
    np.testing.assert_array_equal(got["w"], w)
