"""numba Conv's GEMM path in bands of output rows (kernels/conv.py, kernels/im2col.py).

Each geometry runs with bands of a few output rows forced (the last one partial), so that every
read layout of `window.Window` is gathered, multiplied and finished (bias, residual,
activation) one band at a time, against onnx.reference in float64; then real models' conv
shapes run with the default band policy against onnxruntime.
"""

from __future__ import annotations

import zlib
from typing import Any

import numba
import numpy as np
import pytest
from onnx import helper

from turnout.sdk.semantics.activations import activation
from turnout.tools.testing import one_node_model, provider_session, run_reference
from turnout_numba.kernels import conv as conv_mod
from turnout_numba.kernels import im2col

GEOMETRIES: list[tuple[str, tuple[int, ...], int, int, tuple[int, ...], dict[str, Any]]] = [
    # (what, x shape, M, group, kernel, attributes)
    ("flat same 3x3", (2, 5, 11, 7), 6, 1, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("flat asymmetric", (1, 4, 9, 8), 5, 1, (3, 3), {"pads": [0, 2, 1, 0]}),
    ("flat direct valid 1 column", (1, 3, 10, 1), 4, 1, (3, 1), {}),
    ("padded stride 2", (1, 4, 15, 13), 8, 1, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    (
        "padded stride 2 7x7",
        (1, 3, 21, 20),
        5,
        1,
        (7, 7),
        {"pads": [3, 3, 3, 3], "strides": [2, 2]},
    ),
    ("padded stride 3", (1, 3, 17, 19), 4, 1, (3, 3), {"pads": [1, 2, 0, 1], "strides": [3, 3]}),
    ("padded dilated", (1, 4, 12, 13), 3, 1, (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ("direct valid", (2, 4, 10, 11), 6, 1, (3, 3), {}),
    ("1x1 stride 2", (1, 8, 13, 12), 6, 1, (1, 1), {"strides": [2, 2]}),
    ("pointwise", (2, 7, 9, 10), 5, 1, (1, 1), {}),
    ("pointwise grouped", (1, 8, 11, 6), 6, 2, (1, 1), {}),
    ("1-D pointwise", (1, 6, 33), 4, 1, (1,), {}),
    ("grouped", (2, 8, 9, 10), 6, 2, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("1-D same", (2, 6, 40), 5, 1, (5,), {"pads": [2, 2]}),
    ("1-D stride 2", (1, 4, 41), 3, 1, (3,), {"pads": [1, 1], "strides": [2]}),
]

pytestmark = pytest.mark.usefixtures("conv_kernel_paths")


def _run(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, z: np.ndarray | None, **attrs: Any
) -> np.ndarray:
    names = ["x", "w", "b"] + (["z"] if z is not None else [])
    feeds = [v for v in (x, w, b, z) if v is not None]
    node = helper.make_node(
        "FusedConv", names, ["y"], domain="ai.turnout", activation="Relu", **attrs
    )
    sess = provider_session(one_node_model(node, feeds, 17), "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    return np.asarray(sess.run(None, dict(zip(names, feeds)))[0])


@pytest.mark.parametrize("rows", [1, 3, 10**6])  # 10**6: one band, planes padded inline
@pytest.mark.parametrize(
    "what, shape, m, group, kernel, attrs", GEOMETRIES, ids=[g[0] for g in GEOMETRIES]
)
def test_tiles_match_reference(
    monkeypatch: pytest.MonkeyPatch,
    rows: int,
    what: str,
    shape: tuple[int, ...],
    m: int,
    group: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
) -> None:
    monkeypatch.setattr(conv_mod, "tile_rows", lambda *_: rows)
    rng = np.random.default_rng(zlib.crc32(what.encode()))
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((m, shape[1] // group, *kernel)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, **attrs)
    ref = run_reference(node, [v.astype(np.float64) for v in (x, w, b)], 17)[0]
    z = rng.standard_normal(ref.shape).astype(np.float32)
    got = _run(x, w, b, z, group=group, **attrs)
    want = activation("Relu", 0.0, 0.0)(ref + z)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


VARIANTS: dict[str, tuple[str, bool, bool]] = {
    # what the fused band kernel's epilogue holds: (activation, bias, residual Z)
    "relu bias z": ("Relu", True, True),
    "sigmoid bias": ("Sigmoid", True, False),
    "plain": ("", False, False),
}


@pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2,
    reason="numba has one thread on this machine: the fused band kernel runs with threads only",
)
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize(
    "what, shape, m, group, kernel, attrs", GEOMETRIES, ids=[g[0] for g in GEOMETRIES]
)
def test_fused_bands_match_reference(
    monkeypatch: pytest.MonkeyPatch,
    variant: str,
    rows: int,
    what: str,
    shape: tuple[int, ...],
    m: int,
    group: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
) -> None:
    """With 2 threads, bands of `rows` output rows forced through `conv_bands` (gather,
    product and epilogue in one parallel kernel) give the reference; a spy checks it ran."""
    monkeypatch.setattr(
        conv_mod, "fused_band", lambda _pixel, ow, oh, _threads: rows * ow if rows < oh else 0
    )
    fused: list[int] = []
    real = conv_mod._banded_conv

    def spy(*args: Any) -> None:
        fused.append(1)
        real(*args)

    monkeypatch.setattr(conv_mod, "_banded_conv", spy)
    act, with_b, with_z = VARIANTS[variant]
    rng = np.random.default_rng(zlib.crc32(what.encode()))
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((m, shape[1] // group, *kernel)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, **attrs)
    ref = run_reference(node, [v.astype(np.float64) for v in (x, w, b if with_b else 0 * b)], 17)[0]
    z = rng.standard_normal(ref.shape).astype(np.float32)
    names = ["x", "w"] + (["b"] if with_b else []) + (["z"] if with_z else [])
    feeds = [x, w] + ([b] if with_b else []) + ([z] if with_z else [])
    if act:
        node = helper.make_node(
            "FusedConv", names, ["y"], domain="ai.turnout", activation=act, group=group, **attrs
        )
    else:
        node = helper.make_node("Conv", names, ["y"], group=group, **attrs)
    model = one_node_model(node, feeds, 17)
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=2)
    got = sess.run(None, dict(zip(names, feeds)))[0]
    want = activation(act or "Identity", 1.0, 0.0)(ref + (z if with_z else 0))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    out_h = ref.shape[2] if ref.ndim == 4 else 1
    assert bool(fused) == (rows < out_h), fused  # im2col and pointwise plans alike


def test_fused_band_policy() -> None:
    pixel = (576 + 64) * 4  # ResNet's 56x56 3x3: 2.5 KB of columns and outputs a pixel
    band = im2col.fused_band(pixel, 56, 56, 2)
    assert band % 56 == 0 and band * pixel <= im2col.TILE_BYTES
    assert -(-56 * 56 // band) >= 4  # two bands a thread at least
    assert im2col.fused_band(pixel, 56, 56, 1) == 0  # one thread: not fused
    assert im2col.fused_band(pixel, 7, 7, 2) == 0  # too small to cut: the split product
    assert im2col.fused_band(10**6, 5000, 4, 2) == 5000  # a row wider than the cache budget
    assert im2col.fused_band((512 + 1000) * 4, 13, 13, 2) == 7 * 13  # 7 + 6 rows, not 10 + 3
    assert im2col.fused_band(64, 13, 13, 4) == 0  # fewer bands than threads


def test_tile_policy() -> None:
    # a small image is one band; a big one is cut into whole rows of at least MIN_TILE pixels
    assert im2col.tile_rows((27 + 16) * 4, 40, 40) == 40
    pixel, ow, oh = (1152 + 32) * 4, 56, 56
    rows = im2col.tile_rows(pixel, ow, oh)
    assert 1 <= rows < oh
    assert rows * ow >= im2col.MIN_TILE
    assert (rows - 1) * ow * pixel < max(im2col.TILE_BYTES, pixel * im2col.MIN_TILE)
    assert im2col.tile_rows(10**6, 10**5, 3) == 1  # one row wider than any budget
    # a session with threads asks for bands big enough for BLAS to share among them
    assert im2col.tile_rows(pixel, ow, oh, least=2000) * ow >= 2000


def test_threads_keep_big_bands(monkeypatch: pytest.MonkeyPatch) -> None:
    """With threads and without the fused band kernel (no `cblas_sgemm`), a band's product is
    at least twice what runs serial (`POOL_SERIAL_MACS`), so that banding does not take the
    threads away from the convolution's products."""
    from turnout_numba.kernels.pool_matmul import POOL_SERIAL_MACS

    monkeypatch.setattr(conv_mod, "fused_band", lambda *_: 0)
    monkeypatch.setattr(conv_mod, "_shift_applies", lambda *_: False)  # the im2col path
    monkeypatch.setattr(conv_mod, "TILE_MAX_K", 0)  # on BLAS (`pool_matmul`), not the tile
    x = np.random.default_rng(0).standard_normal((1, 32, 80, 80)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((32, 32, 3, 3)).astype(np.float32)
    model = one_node_model(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4), [x, w], 17)
    real = conv_mod.pool_matmul
    widths: dict[int, list[int]] = {1: [], 2: []}
    for threads, seen in widths.items():

        def spy(a: Any, b: Any, out: Any = None, tile: bool = False, seen: list[int] = seen) -> Any:
            seen.append(b.shape[1])
            return real(a, b, out=out, tile=tile)

        monkeypatch.setattr(conv_mod, "pool_matmul", spy)
        sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
        sess.run(None, {"x": x, "w": w})
    assert sum(widths[1]) == sum(widths[2]) == 80 * 80
    assert len(widths[1]) > 1  # 1 thread: cache-sized bands
    assert min(widths[2][:-1] or widths[2]) * 32 * 288 >= 2 * POOL_SERIAL_MACS


# conv shapes of the benchmark models whose column panels are tiled or large
MODEL_SHAPES: list[tuple[str, tuple[int, ...], tuple[int, ...], int, int]] = [
    ("yolo stem", (1, 3, 320, 320), (16, 3, 3, 3), 2, 1),
    ("yolo 80x80 3x3", (1, 32, 80, 80), (32, 32, 3, 3), 1, 1),
    ("resnet stem 7x7", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    ("resnet 56x56 3x3", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    ("densenet 56x56 3x3", (1, 128, 56, 56), (32, 128, 3, 3), 1, 1),
    ("densenet 28x28 3x3", (1, 128, 28, 28), (32, 128, 3, 3), 1, 1),
]


@pytest.mark.parametrize(
    "what, xs, ws, stride, pad", MODEL_SHAPES, ids=[s[0] for s in MODEL_SHAPES]
)
def test_model_shapes_match_onnxruntime(
    what: str, xs: tuple[int, ...], ws: tuple[int, ...], stride: int, pad: int
) -> None:
    ort = pytest.importorskip("onnxruntime", reason="parity at model shapes is against onnxruntime")
    rng = np.random.default_rng(zlib.crc32(what.encode()))
    x = rng.random(xs, dtype=np.float32)
    w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    attrs = {"strides": [stride, stride], "pads": [pad] * 4}
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    model = one_node_model(node, [x, w, b], 17).SerializeToString()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "w": w, "b": b}
    )[0]
    got = _run(x, w, b, None, **attrs)
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "pads"),
    [((1, 512, 13, 13), (1000, 512, 1, 1), 0), ((2, 48, 13, 11), (197, 48, 3, 3), 1)],
    ids=["pointwise-by-rows", "im2col-two-images"],
)
def test_threads_split_unfused_products_on_the_tile(
    monkeypatch: pytest.MonkeyPatch, x_shape: tuple[int, ...], w_shape: tuple[int, ...], pads: int
) -> None:
    """With threads, a conv whose weights outweigh its image (no fused bands) splits its
    products between the threads, each part on the register tile where the tile serves it
    without threads; its answer is onnx.reference's."""
    from turnout_numba.kernels import pool_matmul as pm
    from turnout_numba.kernels import sgemm_tile

    if not conv_mod._tile_applies(np.dtype(np.float32), 64, 512, 169):
        pytest.skip("this host's convs keep BLAS (no AVX-512 register tile)")
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread on this machine: nothing is split")
    assert sgemm_tile.AVAILABLE
    calls: list[tuple[int, ...]] = []
    real = pm._tile_kernel

    def spy() -> Any:
        kern = real()
        return lambda *args: calls.append(args[2].shape) or kern(*args)

    monkeypatch.setattr(pm, "_tile_kernel", spy)
    monkeypatch.setattr(conv_mod, "FUSED_MIN_COLUMNS", 1 << 20)  # no fused bands here
    rng = np.random.default_rng(5)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * 0.05).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[pads] * 4)
    model = one_node_model(node, [x, w], 17)
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=2)
    got = sess.run(None, {"x": x, "w": w})[0]
    assert calls and all(shape[0] == w_shape[0] for shape in calls)
    want = run_reference(node, [x.astype(np.float64), w.astype(np.float64)], 17)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
