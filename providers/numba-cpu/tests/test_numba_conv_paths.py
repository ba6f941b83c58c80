"""numba Conv/FusedConv along each of its paths, against onnx.reference (computed in float64).

The paths (see kernels/conv.py, depthwise.py, window.py): the depthwise kernel with its taps
unrolled (up to 25) or looped, over the whole plane at once ('same' stride 1) or over a padded
copy split by column phase (strides, dilations, 'valid' and asymmetric pads); im2col + GEMM for
grouped and dense convs (the same two read layouts); pointwise GEMM. Each case names the path it
is meant to take; a seeded sweep then mixes geometry at random.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from turnout.sdk.semantics.activations import ACTIVATION_DEFAULTS, activation
from turnout.tools.testing import one_node_model, provider_session, run_reference
from turnout_numba.kernels.window import plan_window

ACTIVATIONS: list[tuple[str, list[float]]] = [
    ("Relu", []),
    ("LeakyRelu", [0.1]),
    ("Sigmoid", []),
    ("HardSigmoid", [0.3, 0.4]),
    ("Clip", [-0.5, 0.7]),
    ("Gelu", []),
    ("HardSwish", [0.2, 0.4]),
    ("Swish", [1.5]),
]

pytestmark = pytest.mark.usefixtures("conv_kernel_paths")


def _reference(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any]
) -> np.ndarray:
    """onnx.reference's Conv on float64 copies: the exact result the float32 one is held to."""
    names = ["x", "w"] + (["b"] if b is not None else [])
    node = helper.make_node("Conv", names, ["y"], **attrs)
    vals = [v.astype(np.float64) for v in (x, w, b) if v is not None]
    return np.asarray(run_reference(node, vals, 17)[0])


def _check(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    z: np.ndarray | None = None,
    act: tuple[str, list[float]] | None = None,
    threads: int = 1,
    **attrs: Any,
) -> None:
    names = ["x", "w", "b" if b is not None else ""]
    feeds = [x, w, b]
    if act is not None or z is not None:
        if z is not None:
            names.append("z")
            feeds.append(z)
        fattrs = dict(attrs)
        if act is not None:
            fattrs["activation"] = act[0]
            if act[1]:
                fattrs["activation_params"] = act[1]
        node = helper.make_node("FusedConv", names, ["y"], domain="ai.turnout", **fattrs)
    else:
        node = helper.make_node("Conv", names, ["y"], **attrs)
    model = one_node_model(node, feeds, 17)
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    got = sess.run(None, {n: v for n, v in zip(names, feeds) if n})[0]
    want = _reference(x, w, b, attrs)
    if z is not None:
        want = want + z
    if act is not None:
        d = ACTIVATION_DEFAULTS[act[0]]
        a0 = act[1][0] if act[1] else d[0]
        a1 = act[1][1] if len(act[1]) > 1 else d[1]
        want = activation(act[0], a0, a1)(want)
    assert got.dtype == x.dtype and got.shape == want.shape
    tol = (1e-3, 1e-5) if x.dtype == np.float32 else (1e-9, 1e-12)
    np.testing.assert_allclose(got, want, rtol=tol[0], atol=tol[1] * max(1.0, np.abs(want).max()))


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dt: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dt)


# ------------------------------------------------------------------------------------------
# the depthwise kernel

DEPTHWISE: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    # (what, x shape, kernel, attributes)
    ("flat 3x3 same", (1, 8, 12, 10), (3, 3), {"pads": [1, 1, 1, 1]}),
    ("flat 5x5 same", (2, 6, 9, 11), (5, 5), {"pads": [2, 2, 2, 2]}),
    ("flat SAME_UPPER even kernel", (1, 4, 7, 8), (2, 2), {"auto_pad": "SAME_UPPER"}),
    ("flat SAME_LOWER even kernel", (1, 4, 7, 8), (4, 4), {"auto_pad": "SAME_LOWER"}),
    ("flat pads beyond the plane", (1, 3, 2, 3), (5, 5), {"pads": [2, 2, 2, 2]}),
    ("flat 1x1 plane", (1, 5, 1, 1), (3, 3), {"pads": [1, 1, 1, 1]}),
    ("flat direct (no pads, 1 column)", (1, 4, 9, 1), (3, 1), {}),
    ("flat row dilation", (1, 4, 11, 9), (3, 3), {"pads": [2, 1, 2, 1], "dilations": [2, 1]}),
    ("padded stride 2", (1, 8, 14, 14), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("padded s2 odd width", (2, 4, 13, 15), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("padded stride 2, 5x5", (1, 6, 16, 16), (5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ("padded stride 3", (1, 4, 17, 19), (3, 3), {"pads": [1, 2, 0, 1], "strides": [3, 3]}),
    ("padded stride (1, 2)", (1, 4, 9, 12), (3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 2]}),
    ("padded stride (2, 1)", (1, 4, 9, 12), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1]}),
    ("padded valid", (1, 5, 10, 11), (3, 3), {"auto_pad": "VALID"}),
    ("flat asymmetric", (1, 5, 10, 11), (3, 3), {"pads": [0, 2, 1, 0]}),
    ("padded asymmetric", (1, 5, 10, 11), (3, 3), {"pads": [0, 2, 1, 1]}),
    ("padded dilated", (1, 4, 12, 13), (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ("SAME_UPPER s2", (1, 4, 11, 10), (3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("SAME_LOWER s2", (1, 4, 11, 10), (4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    # short planes (`window.SHORT_PLANE_SHARE`): the padded layout, a pass per kernel row
    ("short 5x5 over 2 rows", (1, 6, 2, 19), (5, 5), {"pads": [2, 2, 2, 2]}),
    ("short 5x5 over 3 rows, asymmetric", (2, 5, 3, 17), (5, 5), {"pads": [1, 2, 3, 2]}),
    ("short 3x3 over 1 row", (1, 4, 1, 33), (3, 3), {"pads": [1, 1, 1, 1]}),
    ("short, dilated rows", (1, 4, 2, 9), (3, 3), {"pads": [2, 1, 2, 1], "dilations": [2, 1]}),
    ("short, rows of padding only", (1, 3, 2, 8), (5, 5), {"pads": [3, 2, 3, 2]}),
    ("generic 7x7 flat", (1, 3, 10, 9), (7, 7), {"pads": [3, 3, 3, 3]}),
    ("generic 7x7 stride 2", (1, 3, 15, 14), (7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    ("1-D flat k3", (2, 6, 20), (3,), {"pads": [1, 1]}),
    ("1-D causal k5", (1, 6, 17), (5,), {"pads": [4, 0]}),
    ("1-D valid k4", (1, 3, 16), (4,), {}),
    ("1-D stride 2", (1, 4, 21), (3,), {"pads": [1, 1], "strides": [2]}),
    ("1-D dilated", (1, 4, 21), (3,), {"pads": [2, 2], "dilations": [2]}),
    ("1-D generic k31", (1, 3, 40), (31,), {"pads": [15, 15]}),
]


@pytest.mark.parametrize("what, shape, kernel, attrs", DEPTHWISE, ids=[c[0] for c in DEPTHWISE])
@pytest.mark.parametrize("multiplier", [1, 2])
def test_depthwise_paths(
    what: str,
    shape: tuple[int, ...],
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
    multiplier: int,
) -> None:
    rng = np.random.default_rng(zlib.crc32(what.encode()) + multiplier)
    c = shape[1]
    x = _rand(rng, shape)
    w = _rand(rng, (c * multiplier, 1, *kernel))
    b = _rand(rng, (c * multiplier,)) if multiplier == 1 else None
    _check(x, w, b, group=c, kernel_shape=list(kernel), **attrs)


# The paths write the activation through one shared expression: every activation is checked
# on one path, and each other path with one activation that has parameters and one that does
# not (each pair is a kernel to compile: the full cross product cost CI a minute).
OTHER_PATHS_ACTIVATIONS = ("Clip", "Sigmoid")


@pytest.mark.parametrize("act", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_depthwise_fused_activation(act: tuple[str, list[float]]) -> None:
    """The activation is applied as the depthwise output is written."""
    rng = np.random.default_rng(11)
    x = _rand(rng, (1, 6, 9, 10))
    w = _rand(rng, (6, 1, 3, 3))
    b = _rand(rng, (6,))
    _check(x, w, b, act=act, group=6, pads=[1, 1, 1, 1])
    if act[0] not in OTHER_PATHS_ACTIVATIONS:
        return
    _check(x, w, b, act=act, group=6, pads=[1, 1, 1, 1], strides=[2, 2])
    short = _rand(rng, (1, 6, 2, 21))  # the short-plane passes apply it as rows are written
    w5 = _rand(rng, (6, 1, 5, 5))
    _check(short, w5, b, act=act, group=6, pads=[2, 2, 2, 2])


@pytest.mark.parametrize("with_bias", [False, True])
def test_depthwise_residual_then_activation(with_bias: bool) -> None:
    """With a residual Z the activation comes after the sum (in the epilogue)."""
    rng = np.random.default_rng(12)
    x = _rand(rng, (2, 4, 8, 8))
    w = _rand(rng, (4, 1, 3, 3))
    b = _rand(rng, (4,)) if with_bias else None
    z = _rand(rng, (2, 4, 8, 8))
    _check(x, w, b, z=z, act=("Relu", []), group=4, pads=[1, 1, 1, 1])


def test_depthwise_float64_and_threads() -> None:
    rng = np.random.default_rng(13)
    x = _rand(rng, (2, 16, 40, 40), np.float64)
    w = _rand(rng, (16, 1, 3, 3), np.float64)
    _check(x, w, group=16, pads=[1, 1, 1, 1], threads=2)
    _check(x, w, group=16, pads=[1, 1, 1, 1], strides=[2, 2], threads=2)
    x32 = _rand(rng, (1, 64, 40, 40))
    w32 = _rand(rng, (64, 1, 5, 5))
    _check(x32, w32, group=64, pads=[2, 2, 2, 2], threads=2)
    _check(_rand(rng, (1, 64, 3, 40)), w32, group=64, pads=[2, 2, 2, 2], threads=2)  # short


def test_depthwise_edge_values_stay_in_their_windows() -> None:
    """A read that crosses a row edge is dropped, not multiplied by zero: an inf or NaN in the
    first or last column reaches only the outputs whose windows hold it."""
    x = np.ones((1, 2, 5, 6), np.float32)
    x[0, 0, 2, 0] = np.inf
    x[0, 1, 3, 5] = np.nan
    w = np.full((2, 1, 3, 3), 0.5, np.float32)
    for attrs in ({"pads": [1, 1, 1, 1]}, {"pads": [1, 1, 1, 1], "strides": [2, 2]}):
        _check_nonfinite(x, w, group=2, **attrs)


def _check_nonfinite(x: np.ndarray, w: np.ndarray, **attrs: Any) -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    sess = provider_session(one_node_model(node, [x, w], 17), "NumbaExecutionProvider")
    got = sess.run(None, {"x": x, "w": w})[0]
    with np.errstate(invalid="ignore"):
        want = _reference(x, w, None, attrs)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5)


# ------------------------------------------------------------------------------------------
# im2col + GEMM

GEMM: list[tuple[str, tuple[int, ...], int, int, tuple[int, ...], dict[str, Any]]] = [
    # (what, x shape, M, group, kernel, attributes)
    ("dense flat 3x3", (1, 3, 12, 10), 8, 1, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("dense stride 2", (2, 3, 15, 16), 6, 1, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("dense valid", (1, 4, 9, 8), 5, 1, (2, 3), {}),
    ("dense dilated", (1, 3, 13, 12), 4, 1, (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ("dense SAME_LOWER", (1, 3, 9, 7), 4, 1, (4, 4), {"auto_pad": "SAME_LOWER"}),
    ("grouped 3", (1, 12, 10, 9), 12, 3, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("grouped 4 s2", (2, 16, 11, 12), 8, 4, (3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 2]}),
    ("grouped 8 1x1", (1, 32, 7, 7), 16, 8, (1, 1), {}),
    ("grouped 2 SAME_UPPER", (1, 6, 8, 9), 4, 2, (3, 3), {"auto_pad": "SAME_UPPER"}),
    ("pointwise", (2, 16, 5, 6), 24, 1, (1, 1), {}),
    ("1x1 stride 2", (1, 8, 9, 10), 12, 1, (1, 1), {"strides": [2, 2]}),
    ("1x1 padded", (1, 8, 5, 6), 4, 1, (1, 1), {"pads": [1, 0, 0, 1]}),
    ("one channel, many filters", (1, 1, 12, 12), 20, 1, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("1-D k3", (2, 9, 16), 10, 1, (3,), {"pads": [1, 1]}),
    ("1-D text-CNN k5 valid", (1, 16, 32), 12, 1, (5,), {}),
    ("1-D grouped", (1, 8, 20), 8, 4, (3,), {"pads": [1, 1], "strides": [2]}),
    ("1-D STFT frames", (1, 1, 1000), 34, 1, (64,), {"strides": [32]}),
    ("1-D STFT padded", (1, 1, 999), 18, 1, (32,), {"strides": [16], "pads": [16, 16]}),
]


@pytest.mark.parametrize("what, shape, m, group, kernel, attrs", GEMM, ids=[c[0] for c in GEMM])
def test_gemm_paths(
    what: str,
    shape: tuple[int, ...],
    m: int,
    group: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
) -> None:
    rng = np.random.default_rng(zlib.crc32(what.encode()))
    x = _rand(rng, shape)
    w = _rand(rng, (m, shape[1] // group, *kernel))
    _check(x, w, _rand(rng, (m,)), group=group, kernel_shape=list(kernel), **attrs)
    _check(x, w, None, act=("Relu", []), group=group, **attrs)


def test_gemm_edge_values_stay_in_their_windows() -> None:
    x = np.ones((1, 3, 6, 5), np.float32)
    x[0, 0, 1, 0] = np.inf
    x[0, 2, 4, 4] = np.nan
    w = np.full((4, 3, 3, 3), 0.25, np.float32)
    _check_nonfinite(x, w, pads=[1, 1, 1, 1])
    _check_nonfinite(x, w, pads=[1, 1, 1, 1], strides=[2, 2])


# ------------------------------------------------------------------------------------------
# random geometry


def _sweep_case(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, Any]]:
    rng = np.random.default_rng(1000 + seed)
    nd = int(rng.choice([1, 2, 2]))
    kind = rng.choice(["depthwise", "grouped", "dense"])
    cg = 1 if kind == "depthwise" else int(rng.integers(1, 4))
    group = int(rng.integers(1, 6)) if kind != "dense" else 1
    c = cg * group
    m = group * (int(rng.integers(1, 3)) if kind == "depthwise" else int(rng.integers(1, 4)))
    k = [int(v) for v in rng.integers(1, 6, nd)]
    attrs: dict[str, Any] = {"group": group, "kernel_shape": k}
    attrs["strides"] = [int(v) for v in rng.integers(1, 4, nd)]
    attrs["dilations"] = [int(v) for v in rng.integers(1, 3, nd)]
    mode = rng.choice(["pads", "same", "SAME_UPPER", "SAME_LOWER", "VALID"])
    if mode == "pads":
        attrs["pads"] = [int(v) for v in rng.integers(0, 4, 2 * nd)]
    elif mode == "same":
        eff = [(kk - 1) * d for kk, d in zip(k, attrs["dilations"])]
        attrs["pads"] = [e // 2 for e in eff] + [e - e // 2 for e in eff]
    else:
        attrs["auto_pad"] = str(mode)
    eff = [(kk - 1) * d + 1 for kk, d in zip(k, attrs["dilations"])]
    spatial = [int(rng.integers(e, e + 12)) for e in eff]
    dt = np.float32 if seed % 4 else np.float64
    x = _rand(rng, (int(rng.integers(1, 3)), c, *spatial), dt)
    w = _rand(rng, (m, cg, *k), dt)
    b = _rand(rng, (m,), dt) if rng.integers(0, 2) else None
    return x, w, b, attrs


@pytest.mark.parametrize("seed", range(40))
def test_conv_sweep(seed: int) -> None:
    x, w, b, attrs = _sweep_case(seed)
    _check(x, w, b, threads=2 if seed % 5 == 0 else 1, **attrs)


# ------------------------------------------------------------------------------------------
# the read plan


def test_window_plan_layouts() -> None:
    same = plan_window((10, 12), (3, 3), (1, 1), (1, 1), (1, 1), (10, 12))
    assert same.flat and same.rlen == 120 and not same.geo[1]
    valid = plan_window((10, 12), (3, 3), (1, 1), (1, 1), (0, 0), (8, 10))
    assert not valid.flat and valid.geo[1]  # reads the input itself
    strided = plan_window((10, 12), (3, 3), (2, 2), (1, 1), (1, 1), (5, 6))
    assert not strided.flat and not strided.geo[1] and strided.rows == 5
    # 5x5 over 2 rows: 6 of each output row's 10 window rows are padding
    assert plan_window((2, 96), (5, 5), (1, 1), (1, 1), (2, 2), (2, 96)).flat
    short = plan_window((2, 96), (5, 5), (1, 1), (1, 1), (2, 2), (2, 96), row_passes=True)
    assert not short.flat and short.rows == 2
    # 3x3 over 12 rows: 2 of 36 window rows
    tall = plan_window((12, 96), (3, 3), (1, 1), (1, 1), (1, 1), (12, 96), row_passes=True)
    assert tall.flat


def test_model_with_initializer_weights() -> None:
    """The usual model: weights and bias are initializers (the depthwise path is chosen from
    their shapes when the session is created)."""
    rng = np.random.default_rng(14)
    w = _rand(rng, (8, 1, 3, 3))
    b = _rand(rng, (8,))
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=8, pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 9, 9])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=1)
    x = _rand(rng, (1, 8, 9, 9))
    got = sess.run(None, {"x": x})[0]
    want = _reference(x, w, b, {"group": 8, "pads": [1, 1, 1, 1]})
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5 * np.abs(want).max())
