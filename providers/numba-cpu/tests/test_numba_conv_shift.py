"""numba Conv's shifted-product path (kernels/conv_shift.py): stride-1 convs as one GEMM per
tap over the padded image's rows (32+ input channels), or on the register tile one product
per band (any number of channels), without im2col.

Every geometry (pads on each side, dilations, rectangular kernels, auto_pad, batches) runs with
bands of 1, 3 and all output rows, at 1 and 2 threads, with the bias, residual and activation
variants of the fused epilogue, against onnx.reference in float64; a spy checks the path ran.
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
from turnout_numba.kernels import conv_shift, sgemm_tile

pytestmark = [
    pytest.mark.skipif(
        not conv_mod._shift_applies((8, 32, 3, 3), 1, [1, 1], np.dtype(np.float32), 56, 1),
        reason="numpy's BLAS exports no cblas_sgemm here (or threadpoolctl is missing)",
    ),
    pytest.mark.usefixtures("conv_kernel_paths"),
]

Geometry = tuple[str, tuple[int, ...], int, tuple[int, int], dict[str, Any]]

GEOMETRIES: list[Geometry] = [
    # (what, x shape, M, kernel, attributes)
    ("same 3x3", (1, 32, 9, 11), 8, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("valid 3x3", (2, 33, 8, 7), 5, (3, 3), {}),
    ("asymmetric pads", (1, 32, 7, 9), 6, (3, 3), {"pads": [0, 2, 1, 0]}),
    ("dilated", (1, 32, 12, 10), 4, (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ("5x5", (1, 40, 10, 10), 7, (5, 5), {"pads": [2, 2, 2, 2]}),
    ("1x3", (1, 32, 6, 13), 5, (1, 3), {"pads": [0, 1, 0, 1]}),
    ("3x1 dilated rows", (1, 32, 14, 5), 3, (3, 1), {"pads": [2, 0, 2, 0], "dilations": [2, 1]}),
    ("same_upper even", (1, 32, 8, 8), 6, (2, 2), {"auto_pad": "SAME_UPPER"}),
    ("one output row", (1, 32, 3, 9), 4, (3, 3), {}),
]

VARIANTS: dict[str, tuple[str, bool, bool]] = {
    "relu bias z": ("Relu", True, True),
    "sigmoid bias": ("Sigmoid", True, False),
    "plain": ("", False, False),
}


def _force_tile(monkeypatch: pytest.MonkeyPatch, tile: bool) -> None:
    """Every product on the register tile (`tile`), or on BLAS."""
    if not tile:
        monkeypatch.setattr(conv_mod, "TILE_MAX_K", 0)
        return
    if not sgemm_tile.AVAILABLE:
        pytest.skip("no register tile on this host")
    monkeypatch.setattr(conv_mod, "TILE_MIN_LANES", 1)
    monkeypatch.setattr(conv_mod, "TILE_MAX_K", 1 << 30)
    monkeypatch.setattr(conv_mod, "TILE_MIN_ROWS", 1)
    monkeypatch.setattr(conv_mod, "TILE_MIN_COLUMNS", 1)
    monkeypatch.setattr(conv_mod, "TILE_MIN_MACS", 0)
    # shifted products at any output width, as `conv_kernel_paths` has it for BLAS
    monkeypatch.setattr(conv_mod, "TILE_SHIFT_MAX_WASTE", float("inf"))


# Each (variant, threads, tile) is a kernel family to compile. Two threads run the same
# epilogue text as one: they are checked with the variant that has every part (bias, residual,
# activation), and the other variants at one thread.
RUNS = [
    (variant, threads, tile)
    for variant in VARIANTS
    for threads in ([1, 2] if variant == "relu bias z" else [1])
    for tile in (False, True)
]


@pytest.mark.parametrize(
    "variant, threads, tile",
    RUNS,
    ids=[f"{v}-{t}-{'tile' if tile else 'blas'}" for v, t, tile in RUNS],
)
@pytest.mark.parametrize("rows", [1, 3, 10**6])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
def test_shifted_products_match_reference(
    monkeypatch: pytest.MonkeyPatch,
    tile: bool,
    threads: int,
    variant: str,
    rows: int,
    geometry: Geometry,
) -> None:
    """One conv of `variant` on the shifted path (`tile` or BLAS) with bands of `rows`
    output rows, against onnx.reference; a spy checks the path ran, twice."""
    what, shape, m, kernel, attrs = geometry
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("numba has fewer threads on this machine")
    monkeypatch.setattr(conv_shift, "shift_rows", lambda *_: rows)
    monkeypatch.setattr(conv_mod, "shift_rows", lambda *_: rows)
    _force_tile(monkeypatch, tile)
    ran: list[bool] = []
    real = conv_mod._shifted_conv

    def spy(*args: Any) -> None:
        ran.append(args[5].tile)
        real(*args)

    monkeypatch.setattr(conv_mod, "_shifted_conv", spy)
    act, with_b, with_z = VARIANTS[variant]
    rng = np.random.default_rng(zlib.crc32(what.encode()))
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((m, shape[1], *kernel)) * 0.2).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    ref = run_reference(conv, [v.astype(np.float64) for v in (x, w, b if with_b else 0 * b)], 17)[0]
    z = rng.standard_normal(ref.shape).astype(np.float32)
    names = ["x", "w"] + (["b"] if with_b else []) + (["z"] if with_z else [])
    feeds = [x, w] + ([b] if with_b else []) + ([z] if with_z else [])
    if act:
        node = helper.make_node(
            "FusedConv", names, ["y"], domain="ai.turnout", activation=act, **attrs
        )
    else:
        node = helper.make_node("Conv", names, ["y"], **attrs)
    sess = provider_session(
        one_node_model(node, feeds, 17), "NumbaExecutionProvider", intra_op_num_threads=threads
    )
    for _ in range(2):  # the second run reuses the padded image and the scratch
        got = sess.run(None, dict(zip(names, feeds)))[0]
        want = activation(act or "Identity", 1.0, 0.0)(ref + (z if with_z else 0))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert ran == [tile, tile]


THIN: list[Geometry] = [
    # fewer input channels than a product per tap on BLAS takes (`SHIFT_MIN_CHANNELS`)
    ("16 channels", (1, 16, 9, 11), 8, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("8 channels, 10 outputs", (2, 8, 7, 12), 10, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("3 channels 5x5", (1, 3, 12, 14), 16, (5, 5), {"pads": [2, 2, 2, 2]}),
    ("2 channels, asymmetric pads", (1, 2, 6, 9), 4, (3, 3), {"pads": [0, 2, 1, 0]}),
]


STRIDED: list[Geometry] = [
    # stride phases: pads odd and even on the left, columns and rows no window reads
    ("3x3 stride 2 pad 1", (1, 16, 11, 12), 8, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("3x3 stride 2 valid", (2, 3, 10, 9), 16, (3, 3), {"strides": [2, 2]}),
    ("7x7 stride 2 pad 3", (1, 3, 17, 15), 8, (7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    (
        "asymmetric pads",
        (1, 5, 9, 13),
        6,
        (3, 3),
        {"pads": [2, 3, 0, 1], "strides": [2, 2]},
    ),
    ("stride 2 x 1", (1, 8, 12, 10), 8, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1]}),
    ("stride 1 x 2", (1, 8, 9, 14), 8, (3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 2]}),
    ("stride 3", (1, 4, 16, 17), 8, (5, 5), {"pads": [2, 2, 2, 2], "strides": [3, 3]}),
    (
        "stride 2 dilated",
        (1, 8, 15, 16),
        8,
        (3, 3),
        {"pads": [2, 2, 2, 2], "strides": [2, 2], "dilations": [2, 2]},
    ),
    ("same_upper stride 2", (1, 8, 9, 9), 8, (3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
]


TILE_ONLY = THIN + STRIDED


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 10**6])
@pytest.mark.parametrize("geometry", TILE_ONLY, ids=[g[0] for g in TILE_ONLY])
def test_the_tile_takes_thin_and_strided_convs_shifted(
    monkeypatch: pytest.MonkeyPatch, threads: int, rows: int, geometry: Geometry
) -> None:
    """On the tile a band's taps are one product of K = C*KH*KW, so a conv with few input
    channels runs shifted too (one-node sessions, 1 thread: 16 -> 16 at 56x56 97 against 132
    us on im2col); a strided one reads its image split into stride phases, where every tap
    reads at stride 1 (64 -> 128 to 20x20 at stride 2: 319 against 340 us)."""
    test_shifted_products_match_reference(monkeypatch, True, threads, "relu bias z", rows, geometry)


def test_strided_shifted_products_need_the_tile() -> None:
    f32 = np.dtype(np.float32)
    assert not conv_mod._shift_applies((8, 32, 3, 3), 1, [2, 2], f32, 56, 1, True, False)
    assert conv_mod._shift_applies((8, 32, 3, 3), 1, [2, 2], f32, 56, 1, True, True)
    blas = conv_shift.ShiftKernel(f32, ("", 0.0, 0.0), False, False, False, tile=False)
    with pytest.raises(ValueError, match="register tile only"):
        blas.geometry((8, 8), (1, 1), (4, 4), (3, 3), (1, 1), (32, 8), 1, (2, 2))


def test_what_takes_the_im2col_path_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real output-width rule
    f32 = np.dtype(np.float32)
    assert conv_mod._shift_applies((8, 32, 3, 3), 1, [1, 1], f32, 16, 1)
    assert not conv_mod._shift_applies((8, 16, 3, 3), 1, [1, 1], f32, 56, 1)  # too few channels
    # ... for a product per tap on BLAS, not for one product per band on the tile
    assert conv_mod._shift_applies((8, 16, 3, 3), 1, [1, 1], f32, 56, 1, True, True)
    assert not conv_mod._shift_applies((8, 32, 3, 3), 1, [2, 2], f32, 56, 1)  # strided
    assert not conv_mod._shift_applies((8, 32, 3, 3), 2, [1, 1], f32, 56, 1)  # grouped
    assert not conv_mod._shift_applies((8, 32, 1, 1), 1, [1, 1], f32, 56, 1)  # pointwise
    assert not conv_mod._shift_applies((8, 32, 3, 3), 1, [1, 1], np.dtype(np.float16), 56, 1)
    # outputs so narrow that the padded columns would be too large a share: 14 wide, 3x3
    assert not conv_mod._shift_applies((8, 32, 3, 3), 1, [1, 1], f32, 14, 1)
    assert not conv_mod._shift_applies((8, 32, 3, 3), 1, [1, 1], f32, 20, 2)  # dilated


def test_band_height_policy() -> None:
    pixel = (64 + 64) * 4
    rows = conv_shift.shift_rows(pixel, 58, 56, 1)
    assert 1 <= rows <= 56 and rows * 58 * pixel <= conv_shift.TILE_BYTES
    assert -(-56 // conv_shift.shift_rows(pixel, 58, 56, 2)) >= 4  # two bands a thread
    assert conv_shift.shift_rows(10**6, 10**4, 5, 1) == 1
