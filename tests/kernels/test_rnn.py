"""RNN, GRU and LSTM: official node cases, onnxruntime on attribute combinations, errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    check_official_case,
    iter_node_cases,
    run_onnxruntime,
    run_own_kernel,
)

CASES = list(iter_node_cases({"RNN", "GRU", "LSTM"}))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official(case):
    check_official_case(case)


GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
CONFIGS = [
    {},
    {"direction": "reverse"},
    {"direction": "bidirectional"},
    {"direction": "bidirectional", "seq_lens": True},
    {"direction": "reverse", "seq_lens": True, "init": True},
    {"clip": 0.7, "init": True},
    {"layout": 1, "direction": "bidirectional", "init": True},
    {"acts": True},
    {"no_bias": True},
]


def _inputs(op, cfg, dtype, seq=5, batch=3, isz=4, hs=6):
    rng = np.random.default_rng(len(str(cfg)) + GATES[op])
    nd = 2 if cfg.get("direction") == "bidirectional" else 1
    g = GATES[op]
    r = lambda *s: rng.normal(0, 0.6, s).astype(dtype)  # noqa: E731
    x = r(batch, seq, isz) if cfg.get("layout") else r(seq, batch, isz)
    names = ["X", "W", "R", "B", "seq", "h0"]
    vals = [
        x,
        r(nd, g * hs, isz),
        r(nd, g * hs, hs),
        None if cfg.get("no_bias") else r(nd, 2 * g * hs),
    ]
    vals.append(np.array([5, 2, 4], np.int32) if cfg.get("seq_lens") else None)
    hshape = (batch, nd, hs) if cfg.get("layout") else (nd, batch, hs)
    vals.append(r(*hshape) if cfg.get("init") else None)
    if op == "LSTM":
        names += ["c0", "P"]
        vals += [
            r(*hshape) if cfg.get("init") else None,
            r(nd, 3 * hs) if cfg.get("init") else None,
        ]
    names = [n if v is not None else "" for n, v in zip(names, vals)]
    while names and not names[-1]:
        names.pop()
        vals.pop()
    return names, vals, nd, hs


ACTS = {
    "RNN": ["LeakyRelu"],
    "GRU": ["HardSigmoid", "Softsign"],
    "LSTM": ["HardSigmoid", "Elu", "Softsign"],
}


def _ort_layout0(node, names, vals, op):
    """onnxruntime only runs layout 0: transpose a layout-1 problem there and back."""
    if not any(a.name == "layout" and a.i == 1 for a in node.attribute):
        return run_onnxruntime(node, vals, 14)
    tvals = list(vals)
    tvals[0] = vals[0].transpose(1, 0, 2)
    for i, n in enumerate(names):
        if n in ("h0", "c0"):
            tvals[i] = vals[i].transpose(1, 0, 2)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "layout"}
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    if "activations" in attrs:
        attrs["activations"] = [a.decode() for a in attrs["activations"]]
    plain = helper.make_node(op, names, list(node.output), **attrs)
    outs = run_onnxruntime(plain, tvals, 14)
    return [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]


@pytest.mark.parametrize("cfg", CONFIGS, ids=[",".join(c) or "default" for c in CONFIGS])
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_against_onnxruntime(op, cfg, dtype=np.float32):
    names, vals, nd, hs = _inputs(op, cfg, dtype)
    attrs = {"hidden_size": hs, "direction": cfg.get("direction", "forward")}
    if "clip" in cfg:
        attrs["clip"] = cfg["clip"]
    if cfg.get("layout"):
        attrs["layout"] = 1
    if cfg.get("acts"):
        attrs["activations"] = ACTS[op] * nd
        attrs["activation_alpha"] = [0.3, 0.8]
        attrs["activation_beta"] = [0.4]
    outs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    variants = [{}]
    if op == "GRU":
        variants = [{"linear_before_reset": 0}, {"linear_before_reset": 1}]
    for extra in variants:
        node = helper.make_node(op, names, outs, **attrs, **extra)
        got = run_own_kernel(node, vals, 14)
        want = _ort_layout0(node, names, vals, op)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_lstm_float64_against_onnxruntime_float32():
    """onnxruntime has no double LSTM: the float64 result must match its float32 one closely."""
    names, vals, _, hs = _inputs("LSTM", {"init": True, "direction": "bidirectional"}, np.float64)
    node = helper.make_node(
        "LSTM", names, ["Y", "Y_h", "Y_c"], hidden_size=hs, direction="bidirectional"
    )
    got = run_own_kernel(node, vals, 14)
    want = run_onnxruntime(
        node, [v.astype(np.float32) if v is not None else None for v in vals], 14
    )
    for g, w in zip(got, want):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_lstm_input_forget_against_onnxruntime():
    names, vals, _, hs = _inputs("LSTM", {"init": True}, np.float32)
    node = helper.make_node("LSTM", names, ["Y", "Y_h", "Y_c"], hidden_size=hs, input_forget=1)
    for g, w in zip(run_own_kernel(node, vals, 14), run_onnxruntime(node, vals, 14)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_unnamed_outputs_and_float16():
    names, vals, _, hs = _inputs("GRU", {}, np.float16)
    node = helper.make_node("GRU", names, ["", "Y_h"], hidden_size=hs)
    _, y_h = run_own_kernel(node, vals, 22)
    assert y_h.dtype == np.float16
    full = run_own_kernel(node, [v.astype(np.float32) if v is not None else None for v in vals], 22)
    np.testing.assert_allclose(y_h, full[1], rtol=2e-2, atol=2e-2)


def test_errors():
    names, vals, _, hs = _inputs("LSTM", {"seq_lens": True}, np.float32)
    node = helper.make_node("LSTM", names, ["Y"], hidden_size=hs)
    bad = list(vals)
    bad[4] = np.array([9, 1, 1], np.int32)
    with pytest.raises(InvalidArgument, match="sequence_lens"):
        run_own_kernel(node, bad, 14)
    bad = list(vals)
    bad[1] = bad[1][:, :-1]
    with pytest.raises(InvalidArgument, match="do not match"):
        run_own_kernel(node, bad, 14)
    node = helper.make_node("RNN", ["X", "W", "R"], ["Y"], hidden_size=hs, activations=["Nope"])
    with pytest.raises(InvalidArgument, match="activation"):
        run_own_kernel(node, vals[:3], 14)
