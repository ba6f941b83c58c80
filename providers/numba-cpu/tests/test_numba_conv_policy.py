"""Which path numba's Conv takes at which shapes (kernels/conv.py), with the real thresholds:
small convs in one call of the serial band kernel (the CPU provider's numpy kernel where
numpy's BLAS exports no GEMM), shifted products only for outputs wide enough,
threaded bands only where the image outweighs the weights. Each case checks the path taken
(spies) and the result against onnx.reference in float64."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import pytest
from onnx import helper

from turnout.sdk.semantics.activations import activation
from turnout.tools.testing import one_node_model, provider_session, run_reference
from turnout_numba.cblas import find_gemm
from turnout_numba.kernels import conv as conv_mod

PATHS = ("_gemm_conv", "_shifted_conv", "_banded_conv", "_small_conv")


def _spy_paths(monkeypatch: pytest.MonkeyPatch, spy: Callable[..., list[str]]) -> list[str]:
    """Record which of the GEMM paths each run takes."""
    monkeypatch.setattr(conv_mod, "TILE_MAX_K", 0)  # BLAS paths (the tile: test_numba_sgemm_tile)
    return spy(PATHS)


def _conv(
    shape: tuple[int, ...],
    m: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
    threads: int = 1,
    act: str = "",
    with_z: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The numba session's result and the reference (float64, then the activation)."""
    rng = np.random.default_rng(zlib.crc32(repr((shape, m, kernel)).encode()))
    x = rng.standard_normal(shape).astype(np.float32)
    cg = shape[1] // int(attrs.get("group", 1))
    w = (rng.standard_normal((m, cg, *kernel)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    ref = run_reference(node, [v.astype(np.float64) for v in (x, w, b)], 17)[0]
    names = ["x", "w", "b"]
    feeds = [x, w, b]
    if with_z:
        names.append("z")
        feeds.append(rng.standard_normal(ref.shape).astype(np.float32))
        ref = ref + feeds[-1]
    if act or with_z:
        node = helper.make_node(
            "FusedConv", names, ["y"], domain="ai.turnout", activation=act or "Relu", **attrs
        )
        ref = activation(act or "Relu", 1.0, 0.0)(ref)
    else:
        node = helper.make_node("Conv", names, ["y"], **attrs)
    model = one_node_model(node, feeds, 17)
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    return sess.run(None, dict(zip(names, feeds)))[0], ref


@pytest.mark.skipif(
    find_gemm("float32") is None,
    reason="numpy's BLAS exports no cblas_sgemm here: small convs run the numpy kernel",
)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "shape, m, kernel, attrs",
    [
        ((1, 129, 3), 16, (3,), {"pads": [1, 1]}),
        ((1, 64, 1), 16, (3,), {"pads": [1, 1]}),
        ((2, 128, 1), 1, (1,), {}),
        ((1, 4, 6), 8, (1,), {}),
        ((1, 1, 576), 8, (256,), {"strides": [128]}),
        ((2, 6, 5, 5), 4, (3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 1], "group": 2}),
    ],
    ids=["vad 3 frames", "one frame", "pointwise to one channel", "pointwise", "stft", "2-D"],
)
@pytest.mark.parametrize("act, with_z", [("", False), ("Sigmoid", False), ("Relu", True)])
def test_small_convs_run_the_serial_band_kernel(
    monkeypatch: pytest.MonkeyPatch,
    conv_path_spy: Callable[..., list[str]],
    act: str,
    with_z: bool,
    shape: tuple[int, ...],
    m: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
    threads: int,
) -> None:
    """A VAD's 1-D convs (3 frames, one frame, pointwise to one output, the STFT's strided
    1-channel conv) and a small grouped 2-D conv: one serial band kernel call per image, at 1
    and 2 threads, with the bias, residual and activation, equal to onnx.reference."""
    ran = _spy_paths(monkeypatch, conv_path_spy)
    got, want = _conv(shape, m, kernel, attrs, threads, act=act, with_z=with_z)
    assert ran == ["_small_conv"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_small_convs_without_a_gemm_run_the_numpy_kernel(
    monkeypatch: pytest.MonkeyPatch, conv_path_spy: Callable[..., list[str]]
) -> None:
    """Where numpy's BLAS exports no GEMM, small convs take the CPU provider's numpy kernel."""
    ran = _spy_paths(monkeypatch, conv_path_spy)
    monkeypatch.setattr(conv_mod, "find_gemm", lambda dtype: None)
    got, want = _conv((1, 129, 3), 16, (3,), {"pads": [1, 1]}, act="Relu", with_z=True)
    assert ran == []
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_convs_above_the_small_size_take_a_gemm_path(
    monkeypatch: pytest.MonkeyPatch, conv_path_spy: Callable[..., list[str]]
) -> None:
    ran = _spy_paths(monkeypatch, conv_path_spy)
    columns = 16 * 3 * 3 * 48 * 48
    assert columns > conv_mod.SMALL_CONV_COLUMNS
    got, want = _conv((1, 16, 48, 48), 8, (3, 3), {"pads": [1, 1, 1, 1]})
    assert ran == ["_gemm_conv"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(
    find_gemm("float32") is None,
    reason="numpy's BLAS exports no cblas_sgemm here: no shifted products at all",
)
@pytest.mark.parametrize("width, path", [(12, "_gemm_conv"), (24, "_shifted_conv")])
def test_shifted_products_only_for_wide_outputs(
    monkeypatch: pytest.MonkeyPatch, conv_path_spy: Callable[..., list[str]], width: int, path: str
) -> None:
    """3x3 over 64 channels: 12 wide (2 padded columns for 12, 17%) by im2col, 24 wide (8%) by
    shifted products."""
    ran = _spy_paths(monkeypatch, conv_path_spy)
    got, want = _conv((1, 64, 12, width), 8, (3, 3), {"pads": [1, 1, 1, 1]})
    assert ran == [path]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2 or find_gemm("float32") is None,
    reason="threaded bands need 2 numba threads and numpy's cblas_sgemm",
)
@pytest.mark.parametrize(
    "m, hw, banded",
    [(200, 9, False), (16, 30, True)],
    ids=["weights outweigh the image", "image outweighs the weights"],
)
def test_threaded_bands_only_where_the_image_outweighs_the_weights(
    monkeypatch: pytest.MonkeyPatch,
    conv_path_spy: Callable[..., list[str]],
    m: int,
    hw: int,
    banded: bool,
) -> None:
    """Pointwise at 2 threads: 200 outputs over 81 pixels as one split product (each band
    would pack all the weights), 16 outputs over 900 pixels as bands (neither small: the
    first would run the serial band kernel)."""
    monkeypatch.setattr(conv_mod, "SMALL_CONV_COLUMNS", 0)
    ran = _spy_paths(monkeypatch, conv_path_spy)
    got, want = _conv((1, 64, hw, hw), m, (1, 1), {}, threads=2, act="Relu")
    assert ran == (["_banded_conv"] if banded else ["_gemm_conv"])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2 or find_gemm("float32") is None,
    reason="the split needs 2 numba threads and numpy's cblas_sgemm",
)
@pytest.mark.parametrize(
    "threads, group, path",
    [(2, 4, "_banded_conv"), (2, 1, "_banded_conv"), (1, 4, "_small_conv")],
    ids=["grouped, 2 threads", "ungrouped, 2 threads", "grouped, 1 thread"],
)
@pytest.mark.parametrize("pointwise", [True, False], ids=["pointwise", "3x3"])
def test_small_convs_share_their_groups_or_pixels_between_threads(
    monkeypatch: pytest.MonkeyPatch,
    conv_path_spy: Callable[..., list[str]],
    threads: int,
    group: int,
    path: str,
    pointwise: bool,
) -> None:
    """ShuffleNet's group-4 pointwise conv (136 -> 136 at 28x28) and a grouped 3x3, both small
    and above `GROUP_SPLIT_MACS`: at 2 threads the parallel band kernel takes the whole image
    as one band and shares the groups; ungrouped, it shares bands of pixels; at 1 thread, the
    serial kernel runs it. The bias, residual and activation are applied per group."""
    # (channels a group, spatial size, outputs, kernel, attributes): the same product per
    # group whatever the group count
    cg, hw, m, kernel, attrs = (
        (34, 28, 136, (1, 1), {}) if pointwise else (8, 14, 96, (3, 3), {"pads": [1, 1, 1, 1]})
    )
    shape = (1, cg * group, hw, hw)
    columns = cg * kernel[0] * kernel[1] * hw * hw
    assert columns <= conv_mod.SMALL_CONV_COLUMNS
    assert columns * m >= conv_mod.GROUP_SPLIT_MACS
    ran = _spy_paths(monkeypatch, conv_path_spy)
    got, want = _conv(shape, m, kernel, {**attrs, "group": group}, threads, with_z=True)
    assert ran == [path]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(
    find_gemm("float32") is None,
    reason="numpy's BLAS exports no cblas_sgemm here: small convs run the numpy kernel",
)
@pytest.mark.parametrize(
    "shape, m, kernel, attrs",
    [
        ((1, 64, 128), 100, (3,), {}),
        ((1, 16, 15, 15), 48, (3, 3), {}),
        ((1, 16, 25, 25), 48, (3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 2]}),
        ((1, 16, 13, 13), 48, (3, 3), {"pads": [1, 1, 1, 1]}),
        ((1, 96, 13, 13), 80, (1, 1), {}),
    ],
    ids=["1-D, one row", "valid", "strided, asymmetric pads", "same", "pointwise"],
)
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_small_convs_split_their_pixels_inside_rows(
    monkeypatch: pytest.MonkeyPatch,
    conv_path_spy: Callable[..., list[str]],
    shape: tuple[int, ...],
    m: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
    dt: Any,
) -> None:
    """Small ungrouped convs above `GROUP_SPLIT_MACS` at 2 threads: one band of pixels a
    thread, cut inside an output row (a 1-D conv's one row; 169, 169 and 121 pixels in two
    bands), gathered from the input, the padded planes or the 'same' layout, multiplied on
    the register tile (float32, where the host has it) or BLAS; equal to onnx.reference."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has fewer threads on this machine")
    ran = conv_path_spy(("_banded_conv", "_small_conv", "_gemm_conv", "_tiled_conv"))
    rng = np.random.default_rng(zlib.crc32(repr((shape, m, kernel)).encode()))
    x = rng.standard_normal(shape).astype(dt)
    w = rng.standard_normal((m, shape[1], *kernel)).astype(dt)
    b = rng.standard_normal(m).astype(dt)
    node = helper.make_node(
        "FusedConv", ["x", "w", "b"], ["y"], domain="ai.turnout", activation="Relu", **attrs
    )
    sess = provider_session(
        one_node_model(node, [x, w, b], 17), "NumbaExecutionProvider", intra_op_num_threads=2
    )
    got = sess.run(None, {"x": x, "w": w, "b": b})[0]
    ref = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    want = np.maximum(run_reference(ref, [x, w, b], 17)[0], 0)
    pixels = int(np.prod(want.shape[2:]))
    assert pixels % 2 == 1 or want.ndim == 3  # the two bands meet inside a row
    columns = int(np.prod(w.shape[1:])) * pixels
    assert conv_mod._small(columns, m, True) and columns * m >= conv_mod.GROUP_SPLIT_MACS
    assert ran == ["_banded_conv"]
    tol = 1e-4 if dt == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))
