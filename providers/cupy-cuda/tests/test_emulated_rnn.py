"""The CuPy recurrent kernels (RNN, GRU, LSTM) on the emulated backend, against turnout's numpy
CPU kernels, over what the ONNX node cases leave out: both directions with different
activations, sequence_lens, layout 1, clip, peepholes, input_forget, linear_before_reset; and
the shared input checks' errors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import one_node_model, provider_session

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _inputs(
    op: str, nd: int, steps: int, batch: int, isz: int, hs: int, rng: np.random.Generator
) -> dict[str, Any]:
    g = GATES[op]
    f = np.float32
    v = {
        "X": rng.standard_normal((steps, batch, isz)).astype(f),
        "W": (0.5 * rng.standard_normal((nd, g * hs, isz))).astype(f),
        "R": (0.5 * rng.standard_normal((nd, g * hs, hs))).astype(f),
        "B": (0.3 * rng.standard_normal((nd, 2 * g * hs))).astype(f),
        "seq": np.array([steps, 1, max(steps - 2, 0)][:batch], np.int32),
        "h0": rng.standard_normal((nd, batch, hs)).astype(f),
    }
    if op == "LSTM":
        v["c0"] = rng.standard_normal((nd, batch, hs)).astype(f)
        v["P"] = (0.3 * rng.standard_normal((nd, 3 * hs))).astype(f)
    return v


def _compare(node_check: Any, op: str, feeds: dict[str, Any], opset: int, **attrs: Any) -> None:
    names = ["X", "W", "R", "B", "seq", "h0"] + (["c0", "P"] if op == "LSTM" else [])
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, [n if n in feeds else "" for n in names], outs, **attrs)
    model = one_node_model(node, [feeds.get(n) for n in names if n in feeds], opset)
    node_check.against_cpu(model, feeds, 1e-5)


CASES = [
    ("RNN", {"direction": "bidirectional", "activations": ["Relu", "Tanh"]}, 2),
    ("RNN", {"direction": "reverse", "clip": 0.5}, 1),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, 2),
    (
        "GRU",
        {
            "direction": "bidirectional",
            "activations": ["HardSigmoid", "Tanh", "Sigmoid", "ScaledTanh"],
            "activation_alpha": [0.3, 0.7],
            "activation_beta": [0.4, 1.1],
        },
        2,
    ),
    ("LSTM", {"direction": "bidirectional", "input_forget": 1, "clip": 2.0}, 2),
    ("LSTM", {"direction": "reverse", "activations": ["Sigmoid", "Softsign", "Elu"]}, 1),
]


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("with_lens", [False, True])
@pytest.mark.parametrize(
    ("op", "attrs", "nd"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_recurrent_matches_cpu(
    node_check: Any, op: str, attrs: dict[str, Any], nd: int, layout: int, with_lens: bool
) -> None:
    rng = np.random.default_rng(7)
    steps, batch, isz, hs = 5, 3, 4, 6
    feeds = _inputs(op, nd, steps, batch, isz, hs, rng)
    if not with_lens:
        del feeds["seq"]
    if layout:
        feeds["X"] = feeds["X"].transpose(1, 0, 2).copy()
        for k in ("h0", "c0"):
            if k in feeds:
                feeds[k] = feeds[k].transpose(1, 0, 2).copy()
    _compare(node_check, op, feeds, 14, hidden_size=hs, layout=layout, **attrs)


def test_sequence_lens_out_of_range(node_check: Any) -> None:
    rng = np.random.default_rng(0)
    feeds = _inputs("GRU", 1, 4, 2, 3, 5, rng)
    feeds["seq"] = np.array([4, 9], np.int32)
    node = helper.make_node("GRU", ["X", "W", "R", "B", "seq"], ["Y"], hidden_size=5, name="gru7")
    del feeds["h0"]
    model = one_node_model(node, [feeds[n] for n in ("X", "W", "R", "B", "seq")], 14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = provider_session(model, node_check.provider)
    with pytest.raises(InvalidArgument, match=r"gru7: sequence_lens \[4, 9\]"):
        sess.run(None, {k: v for k, v in feeds.items() if k != "c0"})


def test_weight_shape_mismatch(node_check: Any) -> None:
    rng = np.random.default_rng(0)
    feeds = _inputs("RNN", 1, 4, 2, 3, 5, rng)
    feeds = {"X": feeds["X"], "W": feeds["W"][:, :, :2].copy(), "R": feeds["R"]}
    node = helper.make_node("RNN", ["X", "W", "R"], ["Y"], hidden_size=5, name="rnn3")
    model = one_node_model(node, list(feeds.values()), 14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = provider_session(model, node_check.provider)
    with pytest.raises(InvalidArgument, match=r"rnn3: W .* do not match"):
        sess.run(None, feeds)
