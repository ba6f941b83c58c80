"""numba MaxPool, AveragePool, the global pools and LRN: random attribute/shape/dtype
combinations against the CPU provider's numpy kernels, each read path of the windowed pools
(against onnx.reference too), a 1-thread session, declines and bad inputs.

The official node cases of these ops run in test_numba_provider.py::test_official_case.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    cpu_session,
    one_node_model,
    provider_session,
    run_onnxruntime,
    run_reference,
)


def _session(model: onnx.ModelProto, **opts: Any) -> turnout.InferenceSession:
    return provider_session(model, "NumbaExecutionProvider", **opts)


def _compare(
    node: Any, x: np.ndarray, opset: int, source: str = "numba", rtol: float = 1e-5, **opts: Any
) -> np.ndarray:
    model = one_node_model(node, [x], opset)
    sess = _session(model, **opts)
    assert [a.source for a in sess.partition_report().assignments] == [source]
    got = sess.run(None, {"x": x})
    want = cpu_session(model).run(None, {"x": x})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=1e-6)
    return got[0]


def _data(rng: np.random.Generator, shape: tuple[int, ...], dt: Any) -> np.ndarray:
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, int(info.max) + 1, shape).astype(dt)
    return (rng.standard_normal(shape) * 3).astype(dt)


def _threads(x: np.ndarray) -> int:
    """Parallel kernels for float32, serial ones otherwise: every variant is tested and cold
    compiles (a parallel one takes seconds) stay few."""
    return 2 if x.dtype == np.float32 else 1


# ------------------------------------------------------------------------------------------
# MaxPool / AveragePool


def _pool_case(seed: int, op: str) -> tuple[Any, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    is_max = op == "MaxPool"
    opset = int(rng.choice([8, 10, 11, 12, 22] if is_max else [7, 10, 11, 19, 22]))
    nd = int(rng.choice([1, 2]))
    kernel = [int(k) for k in rng.integers(1, 5, nd)]
    attrs: dict[str, Any] = {"kernel_shape": kernel}
    dil = [1] * nd
    if opset >= (10 if is_max else 19) and rng.random() < 0.5:
        dil = [int(d) for d in rng.integers(1, 4, nd)]
        attrs["dilations"] = dil
    if rng.random() < 0.7:
        attrs["strides"] = [int(s) for s in rng.integers(1, 4, nd)]
    mode = rng.choice(["pads", "pads", "none", "SAME_UPPER", "SAME_LOWER", "VALID"])
    if mode == "pads":
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
    elif mode != "none":
        attrs["auto_pad"] = str(mode)
    if opset >= 10 and mode != "SAME_UPPER" and mode != "SAME_LOWER" and rng.random() < 0.5:
        attrs["ceil_mode"] = 1
    if not is_max and rng.random() < 0.5:
        attrs["count_include_pad"] = 1
    dts: list[Any] = [np.float32, np.float64, np.float16]
    if is_max and opset >= 12:
        dts += [np.int8, np.uint8]
    dt = dts[int(rng.integers(len(dts)))]
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    spatial = tuple(int(rng.integers(e, e + 9)) for e in eff)
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 5)), *spatial)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    return node, _data(rng, shape, dt), opset


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_random_vs_cpu(op: str, seed: int) -> None:
    node, x, opset = _pool_case(seed, op)
    rtol = 1e-3 if x.dtype == np.float16 else 1e-5
    _compare(node, x, opset, rtol=rtol, intra_op_num_threads=_threads(x))


@pytest.mark.parametrize(
    "op, shape, attrs",
    [
        ("MaxPool", (1, 24, 37, 37), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        ("MaxPool", (2, 8, 30, 31), {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ("MaxPool", (1, 16, 40), {"kernel_shape": [5], "strides": [3], "pads": [2, 2]}),
        (
            "AveragePool",
            (1, 24, 28, 28),
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        ),
        (
            "AveragePool",
            (1, 5, 12, 9),
            # ceil_mode windows running past the end padding: their divisor excludes those taps
            {
                "kernel_shape": [3, 3],
                "strides": [2, 2],
                "pads": [1, 0, 1, 0],
                "ceil_mode": 1,
                "count_include_pad": 1,
            },
        ),
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_pool_cnn_shapes(op: str, shape: Any, attrs: dict[str, Any], threads: int) -> None:
    x = _data(np.random.default_rng(1), shape, np.float32)
    _compare(helper.make_node(op, ["x"], ["y"], **attrs), x, 19, intra_op_num_threads=threads)


def test_max_pool_nan_and_inf() -> None:
    x = np.random.default_rng(2).standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 4, 4] = np.inf
    x[0, 1, 0, 0] = -np.inf
    x[0, 0, 2, 2] = np.nan
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    y = _compare(node, x, 12)
    # onnxruntime's rule (its Indices form: the float32 MLAS path follows SIMD lane order): a
    # NaN counts only as a window's first tap, so (1, 1) is skipped and (2, 2) gives NaN
    with_indices = helper.make_node(
        "MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2]
    )
    np.testing.assert_array_equal(y, run_onnxruntime(with_indices, [x], 12)[0])
    assert not np.isnan(y[0, 0, 0, 0]) and np.isnan(y[0, 0, 1, 1]) and np.isnan(y).sum() == 1
    assert y[0, 1, 2, 2] == np.inf


def test_average_pool_ceil_divisor_matches_onnxruntime() -> None:
    """count_include_pad with a ceil_mode window past the end pad: ORT's divisor too."""
    from turnout.tools.testing import run_onnxruntime

    x = np.arange(1, 1 + 2 * 7 * 7, dtype=np.float32).reshape(1, 2, 7, 7)
    for include in (0, 1):
        node = helper.make_node(
            "AveragePool",
            ["x"],
            ["y"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 0, 0],
            ceil_mode=1,
            count_include_pad=include,
        )
        got = _compare(node, x, 19)
        np.testing.assert_allclose(got, run_onnxruntime(node, [x], 19)[0], rtol=1e-6)


def test_pool_declines_go_to_numpy() -> None:
    rng = np.random.default_rng(3)
    x3 = rng.standard_normal((1, 2, 5, 5, 5)).astype(np.float32)
    node3 = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2])
    _compare(node3, x3, 12, source="numpy")
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    with_idx = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2])
    _compare(with_idx, x, 12, source="numpy")
    # an absent Indices output is not an Indices output
    no_idx = helper.make_node("MaxPool", ["x"], ["y", ""], kernel_shape=[2, 2], strides=[2, 2])
    _compare(no_idx, x, 12)
    # bfloat16 computes in float32
    xb = x.astype(ml_dtypes.bfloat16)
    _compare(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3]), xb, 22)


def _dynamic_model(node: Any, opset: int = 19) -> onnx.ModelProto:
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_bad_inputs(op: str) -> None:
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 3])
    sess = _session(_dynamic_model(node))
    assert sess.partition_report().assignments[0].source == "numba"
    with pytest.raises(InvalidArgument, match="4-D"):
        sess.run(None, {"x": np.zeros((1, 2, 5), np.float32)})
    # short by two strides or more: refused (by less, onnxruntime's windows: test_pool_short_input)
    with pytest.raises(InvalidArgument, match="larger than padded input"):
        sess.run(None, {"x": np.zeros((1, 2, 1, 5), np.float32)})
    (y,) = sess.run(None, {"x": np.zeros((1, 2, 2, 5), np.float32)})  # short by one stride
    assert y.shape == (1, 2, 0, 3)
    # empty batch: an empty output of the right shape
    (y,) = sess.run(None, {"x": np.zeros((0, 2, 5, 5), np.float32)})
    assert y.shape == (0, 2, 3, 3)


# ------------------------------------------------------------------------------------------
# LRN


@pytest.mark.parametrize("seed", range(15))
def test_lrn_random_vs_cpu(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    opset = int(rng.choice([1, 13]))
    size = int(rng.integers(1, 8))
    attrs: dict[str, Any] = {"size": size}
    if rng.random() < 0.7:
        attrs["alpha"] = float(rng.uniform(1e-4, 0.5))
    if rng.random() < 0.7:
        attrs["beta"] = float(rng.choice([0.75, 0.5, 1.0, float(rng.uniform(0.1, 2))]))
    if rng.random() < 0.7:
        attrs["bias"] = float(rng.uniform(0.5, 3))
    rank = int(rng.choice([3, 4, 5]))
    spatial = [int(rng.integers(1, 8)) for _ in range(rank - 2)]
    if seed % 3 == 0:
        spatial[-1] = 300  # several spatial tiles
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 12)), *spatial)
    dt = [np.float32, np.float64, np.float16][seed % 3]
    x = _data(rng, tuple(shape), dt)
    node = helper.make_node("LRN", ["x"], ["y"], **attrs)
    rtol = 1e-3 if dt == np.float16 else 1e-5
    _compare(node, x, opset, rtol=rtol, intra_op_num_threads=_threads(x))


@pytest.mark.parametrize("threads", [1, 2])
def test_lrn_alexnet_shape(threads: int) -> None:
    x = np.random.default_rng(4).standard_normal((1, 96, 55, 55)).astype(np.float32) * 50
    node = helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-4, beta=0.75, bias=1.0)
    _compare(node, x, 13, intra_op_num_threads=threads)


def test_lrn_large_then_small_channels() -> None:
    """The running window sum must not leave residue once huge squares leave the window."""
    x = np.full((1, 12, 3, 3), 1e-3, np.float32)
    x[0, :3] = 3e18
    node = helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.5, beta=0.75, bias=1e-12)
    _compare(node, x, 13)


def test_lrn_non_finite() -> None:
    x = np.random.default_rng(5).standard_normal((1, 10, 20)).astype(np.float32)
    x[0, 2, 3] = np.inf
    x[0, 7, 4] = np.nan
    node = helper.make_node("LRN", ["x"], ["y"], size=3)
    y = _compare(node, x, 13)
    # the inf only reaches channels 1..3 at position 3, the NaN channels 6..8 at position 4
    assert np.isfinite(y[0, 5, 3]) and np.isfinite(y[0, 9, 4]) and np.isnan(y[0, 8, 4])


def test_lrn_bad_input() -> None:
    sess = _session(_dynamic_model(helper.make_node("LRN", ["x"], ["y"], size=3)))
    assert sess.partition_report().assignments[0].source == "numba"
    with pytest.raises(InvalidArgument, match="at least 3-D"):
        sess.run(None, {"x": np.zeros((2, 3), np.float32)})
    (y,) = sess.run(None, {"x": np.zeros((0, 3, 2), np.float32)})
    assert y.shape == (0, 3, 2)


# ------------------------------------------------------------------------------------------
# the read paths of MaxPool/AveragePool (see kernels/window.py) and the global pools

K3 = {"kernel_shape": [3, 3]}
S2 = {"strides": [2, 2]}
P1 = {"pads": [1, 1, 1, 1]}

POOL_PATHS: list[tuple[str, str, tuple[int, ...], dict[str, Any]]] = [
    # (what, op, x shape, attributes)
    ("flat max 3x3 same", "MaxPool", (1, 6, 11, 9), {**K3, **P1}),
    ("flat avg 3x3 same", "AveragePool", (2, 4, 9, 10), {**K3, **P1}),
    ("flat avg include pad", "AveragePool", (1, 4, 7, 8), {**K3, **P1, "count_include_pad": 1}),
    ("flat max 2x2 SAME_UPPER", "MaxPool", (1, 3, 7, 8),
     {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("padded max 3x3 s2", "MaxPool", (1, 5, 14, 15), {**K3, **S2, **P1}),
    ("padded max 2x2 s2", "MaxPool", (2, 4, 12, 13), {"kernel_shape": [2, 2], **S2}),
    ("padded max (2, 1)", "MaxPool", (1, 8, 12, 20), {"kernel_shape": [2, 1], "strides": [2, 1]}),
    ("padded avg 2x2 s2", "AveragePool", (1, 6, 14, 14), {"kernel_shape": [2, 2], **S2}),
    ("padded avg s3 dilated", "AveragePool", (1, 3, 17, 16),
     {"kernel_shape": [3, 2], "strides": [3, 3], "dilations": [2, 2], "pads": [1, 0, 2, 1]}),
    ("padded max ceil", "MaxPool", (1, 3, 10, 11), {**K3, **S2, "ceil_mode": 1}),
    ("padded avg ceil", "AveragePool", (1, 3, 10, 11),
     {**K3, **S2, "pads": [1, 1, 0, 0], "ceil_mode": 1}),
    ("direct max valid", "MaxPool", (1, 4, 9, 10), {"kernel_shape": [3, 2]}),
    ("direct max stride (1, 2)", "MaxPool", (1, 4, 9, 11),
     {"kernel_shape": [2, 2], "strides": [1, 2]}),
    ("direct avg 2x2 s2", "AveragePool", (2, 3, 12, 15), {"kernel_shape": [2, 2], **S2}),
    ("direct avg (1, 2) s2", "AveragePool", (1, 3, 9, 12), {"kernel_shape": [1, 2], **S2}),
    ("padded max 2x2 s2 pads", "MaxPool", (1, 3, 9, 12),
     {"kernel_shape": [2, 2], **S2, "pads": [1, 1, 0, 0]}),
    ("generic max 7x7", "MaxPool", (1, 3, 12, 13), {"kernel_shape": [7, 7], "pads": [3] * 4}),
    ("generic avg 6x6 s2", "AveragePool", (1, 3, 15, 14),
     {"kernel_shape": [6, 6], **S2, "pads": [2] * 4}),
    ("1-D max k3 s2", "MaxPool", (2, 5, 31), {"kernel_shape": [3], "strides": [2]}),
    ("1-D avg same", "AveragePool", (1, 5, 30), {"kernel_shape": [5], "pads": [2, 2]}),
    ("1-D generic max k31", "MaxPool", (1, 3, 50), {"kernel_shape": [31], "pads": [15, 15]}),
    # windows that tile the input (stride = kernel, no padding): _tile_pool
    ("tile avg (3, 2) crnn", "AveragePool", (1, 384, 3, 80),
     {"kernel_shape": [3, 2], "strides": [3, 2]}),
    ("tile avg 3x3 leftover", "AveragePool", (2, 3, 11, 10),
     {"kernel_shape": [3, 3], "strides": [3, 3]}),
    ("tile avg (2, 3) leftover", "AveragePool", (2, 3, 9, 13),
     {"kernel_shape": [2, 3], "strides": [2, 3]}),
    ("1-D tile avg k4", "AveragePool", (1, 5, 30), {"kernel_shape": [4], "strides": [4]}),
    ("1-D tile avg k2", "AveragePool", (2, 5, 31), {"kernel_shape": [2], "strides": [2]}),
]  # fmt: skip
# onnx.reference gets these wrong: its ceil_mode divisor is not onnxruntime's, and a window
# wider than its padded copy raises IndexError
NOT_REFERENCE = {"padded max ceil", "padded avg ceil", "1-D generic max k31"}


@pytest.mark.parametrize("what, op, shape, attrs", POOL_PATHS, ids=[c[0] for c in POOL_PATHS])
@pytest.mark.parametrize("threads", [1, 2])
def test_pool_paths(
    what: str, op: str, shape: tuple[int, ...], attrs: dict[str, Any], threads: int
) -> None:
    rng = np.random.default_rng(len(what) + threads)
    x = _data(rng, shape, np.float32)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    got = _compare(node, x, 19, intra_op_num_threads=threads)
    if what not in NOT_REFERENCE:
        want = run_reference(node, [x.astype(np.float64)], 19)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dt", [np.int8, np.uint8])
def test_max_pool_integers_paths(dt: Any) -> None:
    rng = np.random.default_rng(9)
    x = _data(rng, (1, 3, 9, 10), dt)
    for attrs in (
        {"kernel_shape": [3, 3], "pads": [1] * 4},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4},
        {"kernel_shape": [2, 2]},
    ):
        _compare(helper.make_node("MaxPool", ["x"], ["y"], **attrs), x, 12)


@pytest.mark.parametrize("attrs", [{"pads": [1] * 4}, {"pads": [1] * 4, "strides": [2, 2]}])
def test_max_pool_nan_on_both_paths(attrs: dict[str, Any]) -> None:
    """NaN windows follow onnxruntime's rule on the flat and the padded path alike; a NaN in
    the first or last column stays in its windows."""
    x = np.random.default_rng(6).standard_normal((1, 2, 7, 8)).astype(np.float32)
    x[0, 0, 3, 0] = np.nan
    x[0, 1, 2, 7] = np.nan
    x[0, 1, 5, 3] = np.inf
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], **attrs)
    y = _compare(node, x, 12)
    with_indices = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], **attrs)
    np.testing.assert_array_equal(y, run_onnxruntime(with_indices, [x], 12)[0])


@pytest.mark.parametrize(
    "width, attrs",
    [
        (70, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}),  # max_rows
        (70, {"kernel_shape": [2, 2], "strides": [2, 2]}),  # max_rows, two rows
        (70, {"kernel_shape": [4, 3], "strides": [2, 2], "pads": [1] * 4}),  # max_rows, any
        (12, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}),  # max_plane
        (12, {"kernel_shape": [4, 2], "strides": [2, 2], "pads": [1, 0, 2, 0]}),  # max_plane
        (12, {"kernel_shape": [3, 3], "pads": [1] * 4}),  # max_flat
        (12, {"kernel_shape": [2, 2], "pads": [0, 0, 1, 1]}),  # max_flat, two rows
        (12, {"kernel_shape": [5, 3], "pads": [2, 1, 2, 1]}),  # max_flat, any
    ],
)
def test_max_pool_sees_a_nan_in_any_row(width: int, attrs: dict[str, Any]) -> None:
    """The row pass flags a NaN as it reads it: one NaN in each row in turn (first, middle
    and last column), in windows clamped at the edges and inside, is redone by onnxruntime's
    rule on every kernel; a row holding +inf and -inf together flags too and stays right."""
    x = np.random.default_rng(8).standard_normal((1, 2, 9, width)).astype(np.float32)
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    model = one_node_model(node, [x], 12)
    sess, ref = _session(model, intra_op_num_threads=1), cpu_session(model)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    for row in range(x.shape[2]):
        for col in (0, width // 2, width - 1):
            bad = x.copy()
            bad[0, 1, row, col] = np.nan
            bad[0, 0, row, col], bad[0, 0, (row + 1) % 9, col] = np.inf, -np.inf
            got, want = sess.run(None, {"x": bad})[0], ref.run(None, {"x": bad})[0]
            np.testing.assert_array_equal(got, want, err_msg=f"NaN at row {row}, col {col}")


def test_tiling_is_recognized() -> None:
    """Only stride = kernel, no dilation and no padding take the tiling path (AveragePool)."""
    from turnout_numba.kernels.pool import _tiles

    crnn = ((3, 80), (1, 40))
    assert _tiles(crnn, (3, 2), (3, 2), (1, 1), (0, 0), (0, 0))
    assert _tiles(((12, 13), (6, 6)), (2, 2), (2, 2), (1, 1), (0, 0), (0, 0))  # a column left
    assert not _tiles(crnn, (3, 2), (3, 2), (1, 1), (0, 0), (0, 1))  # end padding
    assert not _tiles(((12, 12), (5, 5)), (2, 2), (2, 2), (2, 2), (0, 0), (0, 0))  # dilated
    assert not _tiles(((12, 12), (6, 11)), (2, 2), (2, 1), (1, 1), (0, 0), (0, 0))  # overlap
    assert not _tiles(((12, 13), (6, 7)), (2, 2), (2, 2), (1, 1), (0, 0), (0, 0))  # ceil


def test_tiling_average_keeps_nan_and_inf_in_their_windows() -> None:
    x = np.ones((1, 2, 6, 8), np.float32)
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 4, 7] = np.inf
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2], strides=[3, 2])
    y = _compare(node, x, 19)
    assert np.isnan(y[0, 0, 0, 0]) and np.isnan(y).sum() == 1
    assert np.isinf(y[0, 1, 1, 3]) and np.isinf(y).sum() == 1
    np.testing.assert_array_equal(y, run_onnxruntime(node, [x], 19)[0])


def test_average_pool_edge_inf_stays_in_its_windows() -> None:
    x = np.ones((1, 1, 5, 6), np.float32)
    x[0, 0, 2, 0] = np.inf
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)
    y = _compare(node, x, 19)
    assert np.isinf(y).sum() == 6  # the windows of columns 0 and 1 in rows 1..3


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize(
    "shape", [(2, 5, 7, 9), (1, 12, 3), (1, 3, 2, 3, 4), (3, 2, 1, 1), (1, 4, 40, 41)]
)
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16])
def test_global_pools(op: str, shape: tuple[int, ...], dt: Any) -> None:
    x = _data(np.random.default_rng(sum(shape)), shape, dt)
    node = helper.make_node(op, ["x"], ["y"])
    rtol = 1e-3 if dt == np.float16 else 1e-5
    got = _compare(node, x, 13, rtol=rtol)
    if op == "GlobalMaxPool" and len(shape) != 4:
        return  # onnx.reference's GlobalMaxPool takes the max over all axes but the first here
    want = run_reference(node, [x.astype(np.float64)], 13)[0]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_global_max_pool_special_values(dt: Any) -> None:
    """NaN of either sign wins (np.max's rule), -0.0 and tiny negatives order correctly."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 6, 5, 7)).astype(dt)
    x[0, 1, 2, 3] = np.nan
    x[1, 2, 0, 0] = -np.nan
    x[0, 3] = -np.inf
    x[1, 4] = -0.0
    x[0, 5] = -rng.random((5, 7)) * 1e-30
    x[1, 3, 1, 1] = np.inf
    node = helper.make_node("GlobalMaxPool", ["x"], ["y"])
    got = _compare(node, x, 13)
    assert np.isnan(got[0, 1]) and np.isnan(got[1, 2]) and got[0, 3] == -np.inf
    assert got[1, 3] == np.inf and got[0, 5] < 0


def test_global_pools_bad_and_empty_inputs() -> None:
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    sess = _session(_dynamic_model(node, 13))
    assert sess.partition_report().assignments[0].source == "numba"
    with pytest.raises(InvalidArgument, match="at least 3-D"):
        sess.run(None, {"x": np.zeros((2, 3), np.float32)})
    (y,) = sess.run(None, {"x": np.zeros((0, 2, 5, 5), np.float32)})
    assert y.shape == (0, 2, 1, 1)
