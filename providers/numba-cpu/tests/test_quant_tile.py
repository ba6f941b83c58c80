"""The int16 GEMM's tiling (`quant_gemm` on `quant_tile`'s vector tile): every edge of the 4 x 2
tile (rows past a multiple of 4, a block's last odd column, blocks of 64 columns) and every
tail of K (16-value steps, the 8-value step, the last values under 8), exact against int64
products, for fed (per-run) and constant operands and for a multi-segment convolution."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from turnout.tools.testing import provider_session

KS = [1, 7, 8, 15, 16, 24, 31, 33, 72]
SHAPES = [(m, n) for m in (1, 2, 3, 4, 5, 7, 9) for n in (1, 2, 3, 65, 130)]


def _matmul(fed_b: bool, a_shape: Any = ("m", "k"), b_shape: Any = ("k", "n")) -> onnx.ModelProto:
    u8 = onnx.TensorProto.UINT8
    inputs = [helper.make_tensor_value_info("a", u8, list(a_shape))]
    if fed_b:
        inputs.append(helper.make_tensor_value_info("b", onnx.TensorProto.INT8, list(b_shape)))
    g = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, None)],
        [numpy_helper.from_array(np.uint8(131), "az")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(autouse=True)
def _int16_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The int16 kernel, also on hosts with VNNI tiles."""
    from turnout_numba.kernels import quant_conv, quant_matmul

    monkeypatch.setattr(quant_matmul, "VNNI", False)
    monkeypatch.setattr(quant_conv, "VNNI", False)


def test_matmul_every_edge_and_tail() -> None:
    rng = np.random.default_rng(0)
    sess: Any = provider_session(_matmul(fed_b=True), "NumbaExecutionProvider")
    assert [x.source for x in sess.partition_report().assignments] == ["numba"]
    for k in KS:
        for m, n in SHAPES:
            a = rng.integers(0, 256, (m, k)).astype(np.uint8)
            b = rng.integers(-128, 128, (k, n)).astype(np.int8)
            got = sess.run(None, {"a": a, "b": b})[0]
            want = (a.astype(np.int64) - 131) @ b.astype(np.int64)
            np.testing.assert_array_equal(got, want, err_msg=f"m={m} k={k} n={n}")


@pytest.mark.parametrize("k", [8, 33, 72])
def test_matmul_constant_b_extreme_codes(k: int) -> None:
    """A packed constant B at the extreme codes (every product +-255 * 128): exact int32."""
    b = np.full((k, 5), -128, np.int8)
    model = _matmul(fed_b=False)
    model.graph.initializer.append(numpy_helper.from_array(b, "b"))
    sess: Any = provider_session(model, "NumbaExecutionProvider")
    for m in (1, 3, 4, 6):
        a = np.tile(np.array([0, 255], np.uint8), (m, k))[:, :k]
        got = sess.run(None, {"a": a})[0]
        np.testing.assert_array_equal(got, (a.astype(np.int64) - 131) @ b.astype(np.int64))


@pytest.mark.parametrize("channels", [3, 8, 24])
def test_conv_segments(channels: int) -> None:
    """A 3x3 convolution with dilation (a run per tap: 9 segments of C values) and without (a
    run per kernel row: 3 segments of 3C), odd output counts: exact against int64 sums."""
    rng = np.random.default_rng(channels)
    x = rng.integers(0, 256, (1, channels, 7, 9)).astype(np.uint8)
    w = rng.integers(-128, 128, (6, channels, 3, 3)).astype(np.int8)
    for dilations in ([1, 1], [1, 2]):
        g = helper.make_graph(
            [helper.make_node("ConvInteger", ["x", "w"], ["y"], dilations=dilations, pads=[1] * 4)],
            "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, list(x.shape))],
            [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, None)],
            [numpy_helper.from_array(w, "w")],
        )
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        got = provider_session(model, "NumbaExecutionProvider").run(None, {"x": x})[0]
        xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        dh, dw = dilations
        oh, ow = got.shape[2:]
        want = np.zeros(got.shape, np.int64)
        for i in range(3):
            for j in range(3):
                patch = xp[0, :, i * dh : i * dh + oh, j * dw : j * dw + ow]
                want[0] += np.einsum("mc,chw->mhw", w[:, :, i, j].astype(np.int64), patch)
        np.testing.assert_array_equal(got, want, err_msg=f"dilations={dilations}")
