"""numba Attention, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss and RotaryEmbedding:
random attribute combinations against the CPU provider (onnx.reference runs these there) and
onnxruntime, and bounds checks.

The official node cases of these ops run in test_numba_provider.py::test_official_case, which
parametrizes over every op in the numba registry.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

import turnout
from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import cpu_session, one_node_model, provider_session, run_onnxruntime


def _session(model: onnx.ModelProto, **opts: Any) -> turnout.InferenceSession:
    return provider_session(model, "NumbaExecutionProvider", **opts)


def _feeds(node: Any, inputs: list[Any]) -> dict[str, Any]:
    return {n: v for n, v in zip(node.input, inputs) if n and v is not None}


def _compare(
    node: Any, inputs: list[Any], opset: int, rtol: float = 1e-5, atol: float = 1e-6, **opts: Any
) -> list[Any]:
    model = one_node_model(node, inputs, opset)
    sess = _session(model, **opts)
    assert all(a.source == "numba" for a in sess.partition_report().assignments)
    feeds = _feeds(node, inputs)
    got = sess.run(None, feeds)
    want = cpu_session(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
    return got


# ------------------------------------------------------------------------------------------
# Attention


def _attention_case(seed: int) -> tuple[Any, list[Any], int]:
    rng = np.random.default_rng(seed)
    opset = int(rng.choice([23, 24, 25]))
    b, sq, skv, dq, dv = 2, int(rng.integers(1, 5)), int(rng.integers(2, 7)), 8, 6
    hkv = int(rng.choice([1, 2]))
    hq = hkv * int(rng.choice([1, 2, 3]))
    rank3 = rng.random() < 0.4
    attrs: dict[str, Any] = {}
    if rank3:
        attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    if rng.random() < 0.5:
        attrs["is_causal"] = 1
    if rng.random() < 0.3:
        attrs["scale"] = float(rng.uniform(0.05, 0.5))
    if rng.random() < 0.3:
        attrs["softcap"] = float(rng.uniform(0.5, 4))
    if opset == 25 and rng.random() < 0.6:
        attrs["left_window_size"] = int(rng.integers(0, 3))
        attrs["right_window_size"] = int(rng.choice([-1, 1]))
    past = rng.random() < 0.4
    npast = int(rng.integers(1, 4)) if past else 0
    nonpad = opset >= 24 and not past and rng.random() < 0.4
    total = skv + npast
    mask_kind = rng.choice(["none", "bool", "float"])
    want_qk = rng.random() < 0.4
    if want_qk:
        attrs["qk_matmul_output_mode"] = int(rng.integers(0, 4))

    def t(*shape: int) -> Any:
        return rng.standard_normal(shape).astype(np.float32)

    if rank3:
        q, k, v = t(b, sq, hq * dq), t(b, skv, hkv * dq), t(b, skv, hkv * dv)
    else:
        q, k, v = t(b, hq, sq, dq), t(b, hkv, skv, dq), t(b, hkv, skv, dv)
    mask = None
    if mask_kind != "none":
        shape = [(sq, total), (b, 1, sq, total), (hq, sq, total), (b, hq, sq, total)][
            int(rng.integers(0, 4))
        ]
        shape = (*shape[:-1], shape[-1] - int(rng.integers(0, 2)))  # shorter: padded
        if mask_kind == "bool":
            mask = rng.random(shape) < 0.8
        else:
            mask = np.where(rng.random(shape) < 0.8, 0, -np.inf).astype(np.float32)
            mask += rng.standard_normal(shape).astype(np.float32)
    inputs: list[Any] = [q, k, v, mask]
    if past:
        inputs += [t(b, hkv, npast, dq), t(b, hkv, npast, dv)]
    if nonpad:
        inputs += [None, None, rng.integers(1, skv + 1, size=b).astype(np.int64)]
    names = ["Q", "K", "V", "mask", "pk", "pv", "nonpad"][: len(inputs)]
    names = [n if x is not None else "" for n, x in zip(names, inputs)]
    while names and not names[-1]:
        names.pop()
    outs = ["Y"] + (["pk_out", "pv_out"] if past else ["", ""]) + (["qk"] if want_qk else [])
    while outs and not outs[-1]:
        outs.pop()
    node = helper.make_node("Attention", names, outs, **attrs)
    return node, inputs[: len(names)], opset


@pytest.mark.parametrize("seed", range(16))
def test_attention_random_matches_reference(seed: int) -> None:
    node, inputs, opset = _attention_case(seed)
    _compare(node, inputs, opset, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_attention_dtypes_match_reference(dtype: Any) -> None:
    rng = np.random.default_rng(3)
    node = helper.make_node(
        "Attention",
        ["Q", "K", "V", "M"],
        ["Y", "", "", "qk"],
        is_causal=1,
        qk_matmul_output_mode=3,
        softcap=3.0,
    )
    q = rng.standard_normal((2, 4, 5, 8)).astype(dtype)
    k = rng.standard_normal((2, 2, 7, 8)).astype(dtype)
    v = rng.standard_normal((2, 2, 7, 8)).astype(dtype)
    mask = rng.random((5, 7)) < 0.8
    tol = 1e-12 if dtype == np.float64 else 1e-2 if dtype == ml_dtypes.bfloat16 else 1e-3
    _compare(node, [q, k, v, mask], 23, rtol=tol, atol=tol)


def test_attention_matches_onnxruntime() -> None:
    rng = np.random.default_rng(7)
    node = helper.make_node("Attention", ["Q", "K", "V", "M"], ["Y"], is_causal=1, scale=0.3)
    inputs = [
        rng.standard_normal((2, 4, 5, 16)).astype(np.float32),
        rng.standard_normal((2, 2, 9, 16)).astype(np.float32),
        rng.standard_normal((2, 2, 9, 12)).astype(np.float32),
        rng.standard_normal((5, 9)).astype(np.float32),
    ]
    sess = _session(one_node_model(node, inputs, 23), intra_op_num_threads=2)
    (got,) = sess.run(None, _feeds(node, inputs))
    (want,) = run_onnxruntime(node, inputs, 23)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_attention_fully_masked_row_is_zero() -> None:
    rng = np.random.default_rng(1)
    node = helper.make_node("Attention", ["Q", "K", "V", "M"], ["Y"])
    q = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
    k = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
    mask = np.ones((3, 3), bool)
    mask[1] = False
    sess = _session(one_node_model(node, [q, k, k, mask], 23))
    (y,) = sess.run(None, {"Q": q, "K": k, "V": k, "M": mask})
    assert np.all(y[0, 0, 1] == 0) and np.all(np.isfinite(y))


def test_attention_bad_shapes_raise() -> None:
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], name="att")
    q = np.zeros((1, 3, 2, 4), np.float32)
    k = np.zeros((1, 2, 2, 4), np.float32)  # 3 query heads are not a multiple of 2
    model = one_node_model(node, [q, k, k], 23)
    with pytest.raises(InvalidArgument, match="att"):
        _session(model).run(None, {"Q": q, "K": k, "V": k})


def test_attention_mixed_value_type_is_declined() -> None:
    """V of another type than Q/K (onnxruntime refuses the model): the numba kernel, compiled
    for Q's type, must not take it; the decline names the input."""
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], name="att")
    q = np.zeros((1, 1, 2, 4), np.float64)
    v = np.zeros((1, 1, 2, 4), np.float32)
    so = turnout.SessionOptions()
    so.fallback = "allow"
    model = one_node_model(node, [q, q, v], 23).SerializeToString()
    sess = turnout.InferenceSession(model, so, providers=["NumbaExecutionProvider"])
    report = sess.partition_report()
    assert [a.provider for a in report.assignments] == ["CPUExecutionProvider"]
    assert "V not of Q's type float64" in report.to_text()


# ------------------------------------------------------------------------------------------
# losses


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("seed", range(8))
def test_loss_random_matches_reference(op: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = [(5, 4), (3, 4, 6), (2, 3, 2, 5)][seed % 3]
    x = rng.standard_normal(shape).astype(np.float32 if seed % 4 else np.float64)
    tdt = np.int64 if seed % 2 else np.int32
    t = rng.integers(0, shape[1], size=(shape[0], *shape[2:])).astype(tdt)
    attrs: dict[str, Any] = {"reduction": ["none", "sum", "mean"][seed % 3]}
    if seed % 3 != 1:
        attrs["ignore_index"] = int(rng.choice([-1, 1, 7]))
        t.flat[::3] = attrs["ignore_index"]
    inputs = [x, t]
    names = ["x", "t"]
    if seed >= 4:
        inputs.append(rng.uniform(0.1, 2, size=shape[1]).astype(x.dtype))
        names.append("w")
    outs = ["loss", "logp"] if op == "SoftmaxCrossEntropyLoss" and seed % 2 else ["loss"]
    node = helper.make_node(op, names, outs, **attrs)
    _compare(node, inputs, 22 if op.startswith("Neg") else 13, rtol=1e-5, atol=1e-6)


def test_loss_float16_matches_reference() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, 3)).astype(np.float16)
    t = rng.integers(0, 5, size=(4, 3)).astype(np.int64)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss", "logp"])
    _compare(node, [x, t], 13, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("bad", [5, -1])
def test_loss_target_out_of_range_raises(op: str, bad: int) -> None:
    x = np.zeros((2, 5, 3), np.float32)
    t = np.zeros((2, 3), np.int64)
    t[1, 2] = bad
    node = helper.make_node(op, ["x", "t"], ["loss"], name="lossnode", ignore_index=2)
    sess = _session(one_node_model(node, [x, t], 22 if op.startswith("Neg") else 13))
    with pytest.raises(InvalidArgument, match=rf"lossnode.*target {bad}"):
        sess.run(None, {"x": x, "t": t})
    t[1, 2] = 2  # ignore_index itself is fine even though it is a valid class too
    sess.run(None, {"x": x, "t": t})


# ------------------------------------------------------------------------------------------
# RotaryEmbedding


@pytest.mark.parametrize("seed", range(8))
def test_rotary_random_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    b, s, h, d = 2, 3, 2, 8
    rot = [0, 4, 8, 6][seed % 4]
    half = (rot or d) // 2
    attrs: dict[str, Any] = {"interleaved": seed % 2}
    if rot:
        attrs["rotary_embedding_dim"] = rot
    if seed % 3 == 0:
        x = rng.standard_normal((b, s, h * d)).astype(np.float32)
        attrs["num_heads"] = h
    else:
        x = rng.standard_normal((b, h, s, d)).astype(np.float32)
    if seed < 4:
        cos = rng.standard_normal((10, half)).astype(np.float32)
        sin = rng.standard_normal((10, half)).astype(np.float32)
        inputs = [x, cos, sin, rng.integers(0, 10, size=(b, s)).astype(np.int64)]
    else:
        cos = rng.standard_normal((b, s, half)).astype(np.float32)
        sin = rng.standard_normal((b, s, half)).astype(np.float32)
        inputs = [x, cos, sin]
    names = ["x", "cos", "sin", "pos"][: len(inputs)]
    node = helper.make_node("RotaryEmbedding", names, ["y"], **attrs)
    _compare(node, inputs, 23)


def test_rotary_bad_position_raises() -> None:
    x = np.zeros((1, 1, 2, 4), np.float32)
    cache = np.zeros((3, 2), np.float32)
    pos = np.array([[0, 3]], np.int64)
    node = helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], name="rope")
    sess = _session(one_node_model(node, [x, cache, cache, pos], 23))
    with pytest.raises(InvalidArgument, match=r"rope.*position"):
        sess.run(None, {"x": x, "c": cache, "s": cache, "p": pos})
