"""numba LSTM, GRU and RNN: random configurations against onnx.reference, the paths onnx.reference
does not model (sequence_lens, activations, clip, input_forget) against turnout's CPU kernel
and onnxruntime, weight packing, and the errors bad inputs must raise.

The official LSTM/GRU/RNN node cases run in test_numba_provider.py::test_official_case.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from turnout.graph.errors import InvalidArgument
from turnout.tools.concurrency import run_from_threads
from turnout.tools.testing import cpu_session, one_node_model, provider_session
from turnout_numba.kernels.rnn import ACTIVATIONS

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
TOL = {np.dtype(np.float32): (1e-4, 1e-5), np.dtype(np.float64): (1e-10, 1e-12)}


def _inputs(
    rng: np.random.Generator,
    op: str,
    *,
    steps: int,
    batch: int,
    isz: int,
    hs: int,
    nd: int,
    layout: int = 0,
    dtype: Any = np.float32,
    optional: tuple[str, ...] = ("B", "initial_h", "initial_c", "P"),
) -> dict[str, np.ndarray]:
    """X, W, R and the optional inputs named in `optional` (those the op has)."""
    g = GATES[op]
    s = 1.0 / np.sqrt(hs)

    def draw(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(dtype)

    x_shape = (steps, batch, isz) if layout == 0 else (batch, steps, isz)
    state = (nd, batch, hs) if layout == 0 else (batch, nd, hs)
    feeds = {
        "X": draw(*x_shape),
        "W": draw(nd, g * hs, isz, scale=s),
        "R": draw(nd, g * hs, hs, scale=s),
    }
    if "B" in optional:
        feeds["B"] = draw(nd, 2 * g * hs, scale=0.5)
    if "initial_h" in optional:
        feeds["initial_h"] = draw(*state)
    if op == "LSTM" and "initial_c" in optional:
        feeds["initial_c"] = draw(*state)
    if op == "LSTM" and "P" in optional:
        feeds["P"] = draw(nd, 3 * hs, scale=0.5)
    return feeds


_ORDER = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


def _model(op: str, feeds: dict[str, np.ndarray], opset: int = 22, **attrs: Any) -> onnx.ModelProto:
    names = [n if n in feeds else "" for n in _ORDER[: 8 if op == "LSTM" else 6]]
    while names and not names[-1]:
        names.pop()
    outs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, outs, name=f"my_{op.lower()}", **attrs)
    return one_node_model(node, [feeds[n] for n in names if n], opset)


def _numba(model: onnx.ModelProto, **opts: Any) -> Any:
    sess = provider_session(model, "NumbaExecutionProvider", **opts)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    return sess


def _close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        rtol, atol = TOL[g.dtype]
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _random_case(seed: int) -> tuple[str, dict[str, np.ndarray], dict[str, Any]]:
    rng = np.random.default_rng(seed)
    op = ["LSTM", "GRU", "RNN"][seed % 3]
    direction = str(rng.choice(["forward", "reverse", "bidirectional"]))
    nd = 2 if direction == "bidirectional" else 1
    # hidden sizes that are not multiples of 4 exercise the GEMV's one-row tail; few (step,
    # batch) rows take the in-kernel input projection, more take BLAS
    hs = int(rng.choice([1, 3, 4, 5, 8, 13, 32]))
    steps, batch = int(rng.integers(1, 7)), int(rng.integers(1, 5))
    layout = int(rng.integers(0, 2))
    dtype = np.float64 if seed % 5 == 0 else np.float32
    optional = tuple(n for n in ("B", "initial_h", "initial_c", "P") if rng.integers(0, 2))
    feeds = _inputs(
        rng, op, steps=steps, batch=batch, isz=int(rng.integers(1, 9)), hs=hs, nd=nd,
        layout=layout, dtype=dtype, optional=optional,
    )  # fmt: skip
    attrs: dict[str, Any] = {"hidden_size": hs, "direction": direction, "layout": layout}
    if op == "GRU":
        attrs["linear_before_reset"] = int(rng.integers(0, 2))
    return op, feeds, attrs


@pytest.mark.parametrize("seed", range(36))
def test_random_configurations_match_reference(seed: int) -> None:
    op, feeds, attrs = _random_case(seed)
    model = _model(op, feeds, **attrs)
    got = _numba(model, intra_op_num_threads=1).run(None, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    _close(got, [np.asarray(w) for w in want])


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_bidirectional_on_two_threads_matches_reference(
    rng: np.random.Generator, op: str, layout: int
) -> None:
    """With threads the two directions run on two workers, each writing its half of Y and of
    the final states; the input projection (40 x 384 @ 384 x 8*hs) is split between them."""
    feeds = _inputs(
        rng, op, steps=40, batch=1, isz=384, hs=96, nd=2, layout=layout, dtype=np.float32,
        optional=("B", "initial_h", "initial_c"),
    )  # fmt: skip
    attrs: dict[str, Any] = {"hidden_size": 96, "direction": "bidirectional", "layout": layout}
    model = _model(op, feeds, **attrs)
    got = _numba(model, intra_op_num_threads=2).run(None, feeds)
    _close(got, [np.asarray(w) for w in ReferenceEvaluator(model).run(None, feeds)])


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("shape", [(1, 1, 128, 128), (40, 1, 96, 64), (3, 8, 32, 48)])
def test_small_model_shapes_match_reference(
    rng: np.random.Generator, op: str, shape: tuple[int, int, int, int]
) -> None:
    """A streaming VAD step (hidden 128, batch 1, one step), an OCR sequence, a small batch."""
    steps, batch, hs, isz = shape
    feeds = _inputs(rng, op, steps=steps, batch=batch, isz=isz, hs=hs, nd=2)
    model = _model(op, feeds, hidden_size=hs, direction="bidirectional")
    got = _numba(model).run(None, feeds)
    _close(got, [np.asarray(w) for w in ReferenceEvaluator(model).run(None, feeds)])


def _vs_cpu_and_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], ort: bool = True) -> None:
    got = _numba(model, intra_op_num_threads=1).run(None, feeds)
    _close(got, cpu_session(model).run(None, feeds))
    if ort:
        onnxruntime = pytest.importorskip("onnxruntime")
        sess = onnxruntime.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        _close(got, sess.run(None, feeds))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layout", [0, 1])
def test_sequence_lens(rng: np.random.Generator, op: str, layout: int) -> None:
    """Rows past their length give zero Y and keep their state (also backwards)."""
    feeds = _inputs(rng, op, steps=5, batch=4, isz=3, hs=6, nd=2, layout=layout)
    feeds["sequence_lens"] = np.array([5, 1, 3, 2], np.int32)
    model = _model(op, feeds, hidden_size=6, direction="bidirectional", layout=layout)
    _vs_cpu_and_ort(model, feeds, ort=layout == 0)  # onnxruntime refuses layout 1
    feeds["sequence_lens"] = np.array([0, 5, 0, 4], np.int32)  # onnxruntime refuses 0
    _vs_cpu_and_ort(model, feeds, ort=False)


# every activation, each with alpha/beta taken in order by those that have them
_ACTS = sorted(ACTIVATIONS)
_SPELLED = {n.lower(): n for n in ["Affine", "Elu", "HardSigmoid", "LeakyRelu", "Relu",
            "ScaledTanh", "Sigmoid", "Softplus", "Softsign", "Tanh",
            "ThresholdedRelu"]}  # fmt: skip


@pytest.mark.parametrize("start", range(0, len(_ACTS), 6))
def test_activation_lists_match_cpu_and_onnxruntime(rng: np.random.Generator, start: int) -> None:
    names = (_ACTS[start:] + _ACTS)[:6]
    takes = [n for n in names if ACTIVATIONS[n][0] != (None, None)]
    feeds = _inputs(rng, "LSTM", steps=4, batch=2, isz=3, hs=5, nd=2)
    model = _model(
        "LSTM", feeds, hidden_size=5, direction="bidirectional",
        activations=[_SPELLED[n] for n in names],
        activation_alpha=[0.3 + 0.1 * i for i in range(len(takes))],
        activation_beta=[0.2 + 0.1 * i for i in range(len(takes))],
    )  # fmt: skip
    _vs_cpu_and_ort(model, feeds, ort=False)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_clip_and_default_activations_match_onnxruntime(rng: np.random.Generator, op: str) -> None:
    feeds = _inputs(rng, op, steps=6, batch=2, isz=4, hs=7, nd=1)
    feeds["X"] *= 4
    attrs: dict[str, Any] = {"hidden_size": 7, "clip": 0.75}
    if op == "LSTM":
        attrs["input_forget"] = 1
    _vs_cpu_and_ort(_model(op, feeds, **attrs), feeds)


def test_per_direction_activations(rng: np.random.Generator) -> None:
    feeds = _inputs(rng, "GRU", steps=3, batch=2, isz=3, hs=4, nd=2)
    acts = ["Sigmoid", "Tanh", "HardSigmoid", "Softsign"]
    model = _model("GRU", feeds, hidden_size=4, direction="bidirectional", activations=acts)
    _vs_cpu_and_ort(model, feeds)


def test_weights_fed_as_inputs_are_packed_each_run(rng: np.random.Generator) -> None:
    """Initializers are packed once; writable inputs may change in place between runs."""
    feeds = _inputs(rng, "LSTM", steps=3, batch=2, isz=4, hs=5, nd=1)
    model = _model("LSTM", feeds, hidden_size=5)
    sess = _numba(model)
    first = sess.run(None, feeds)
    feeds["R"] *= 2.0  # same array object, new values
    feeds["W"][0, 0, 0] += 1.0
    _close(sess.run(None, feeds), cpu_session(model).run(None, feeds))
    assert not np.allclose(first[0], sess.run(None, feeds)[0])


def test_initializer_weights(rng: np.random.Generator) -> None:
    feeds = _inputs(rng, "GRU", steps=2, batch=1, isz=4, hs=8, nd=2)
    model = _model("GRU", feeds, hidden_size=8, direction="bidirectional")
    graph = model.graph
    for name in ("W", "R", "B"):
        graph.initializer.append(numpy_helper.from_array(feeds.pop(name), name))
    keep = [i for i in graph.input if i.name not in ("W", "R", "B")]
    del graph.input[:]
    graph.input.extend(keep)
    sess = _numba(model)
    want = cpu_session(model).run(None, feeds)
    for _ in range(2):  # the second run reuses the packed weights
        _close(sess.run(None, feeds), want)


def test_empty_sequence_and_batch(rng: np.random.Generator) -> None:
    for steps, batch in ((0, 2), (3, 0)):
        feeds = _inputs(rng, "LSTM", steps=steps, batch=batch, isz=3, hs=4, nd=2)
        model = _model("LSTM", feeds, hidden_size=4, direction="bidirectional")
        _vs_cpu_and_ort(model, feeds, ort=False)


def test_empty_input_size(rng: np.random.Generator) -> None:
    """X and W with an empty last dim (the fuzzer's shrink:0): the gates are biases alone.
    Before: reshape(-1, 0) of the empty X raised ValueError."""
    feeds = _inputs(rng, "LSTM", steps=3, batch=1, isz=0, hs=3, nd=1)
    _vs_cpu_and_ort(_model("LSTM", feeds, hidden_size=3, direction="reverse"), feeds, ort=False)


def test_bad_inputs_name_the_node(rng: np.random.Generator) -> None:
    feeds = _inputs(rng, "LSTM", steps=3, batch=2, isz=4, hs=5, nd=1)
    feeds["sequence_lens"] = np.array([3, 2], np.int32)
    node = helper.make_node(
        "LSTM", _ORDER, ["Y"], name="my_lstm", hidden_size=5
    )  # inputs declared without shapes, so that wrong ones reach the kernel
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), None)
         for n, v in feeds.items()],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    sess = _numba(model)
    bad = {
        "X": feeds["X"][:, :, :3],
        "R": feeds["R"][:, :, :4],
        "B": feeds["B"][:, :7],
        "P": feeds["P"][:, :3],
        "initial_h": feeds["initial_h"][:, :1],
        "sequence_lens": np.array([4, 1], np.int32),
    }
    for name, value in bad.items():
        with pytest.raises(InvalidArgument, match="my_lstm"):
            sess.run(None, {**feeds, name: value})


def test_float16_goes_to_numpy_and_unknown_activations_are_refused(
    rng: np.random.Generator,
) -> None:
    feeds = _inputs(rng, "RNN", steps=2, batch=1, isz=3, hs=4, nd=1, dtype=np.float16)
    sess = provider_session(_model("RNN", feeds, hidden_size=4), "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numpy"]
    feeds = _inputs(rng, "RNN", steps=2, batch=1, isz=3, hs=4, nd=1)
    with pytest.raises(InvalidArgument, match="Gelu"):  # neither kernel has it
        provider_session(
            _model("RNN", feeds, hidden_size=4, activations=["Gelu"]), "NumbaExecutionProvider"
        )


@pytest.mark.parametrize("act", ["Tanh", "Sigmoid", "ScaledTanh"])
def test_float32_activation_accuracy(act: str) -> None:
    """float32 tanh/sigmoid are a rational approximation: with W = 1 and R = 0 an RNN's Y is
    the activation of X itself, checked on a dense grid against float64 numpy."""
    x = np.concatenate([np.linspace(-12, 12, 24001), [0.0, 1e-30, -1e-30, 1e-8, np.inf, -np.inf]])
    feeds = {
        "X": x.astype(np.float32).reshape(-1, 1, 1),
        "W": np.ones((1, 1, 1), np.float32),
        "R": np.zeros((1, 1, 1), np.float32),
    }
    attrs: dict[str, Any] = {"hidden_size": 1, "activations": [act]}
    if act == "ScaledTanh":
        attrs.update(activation_alpha=[1.5], activation_beta=[0.5])
    (y,) = _numba(_model("RNN", feeds, **attrs)).run(["Y"], feeds)
    x64 = feeds["X"].astype(np.float64).ravel()
    want = {
        "Tanh": np.tanh(x64),
        "Sigmoid": 0.5 + 0.5 * np.tanh(0.5 * x64),
        "ScaledTanh": 1.5 * np.tanh(0.5 * x64),
    }[act]
    err = np.abs(y.ravel().astype(np.float64) - want)
    if act == "Sigmoid":  # 0.5 + 0.5 tanh(x / 2): absolute error (small outputs cancel)
        assert err.max() <= 2e-7
    else:  # relative error, also near zero where tanh(x) ~ x
        assert (err <= 4e-7 * np.abs(want) + 1e-38).all()


def test_shared_session_is_thread_safe(rng: np.random.Generator) -> None:
    """Concurrent runs with different lengths and fed weights (packed per run)."""
    feeds = []
    for steps in (1, 3, 6):
        f = _inputs(rng, "GRU", steps=steps, batch=2, isz=3, hs=5, nd=2)
        for name in ("W", "R", "B"):
            f[name].flags.writeable = False  # as initializers arrive: packed, then kept
        feeds.append(f)
    model = _model("GRU", feeds[0], hidden_size=5, direction="bidirectional")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "steps"
    result = run_from_threads(_numba(model), feeds, threads=4, runs=100, switch_interval=1e-5)
    assert result.clean, result
