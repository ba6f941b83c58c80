"""The register-tile SGEMM (kernels/sgemm_tile.py) and the convs that run on it.

The tile is checked against numpy's matmul in float64 over shapes covering every remainder
(M past a multiple of the tile's rows, N past a multiple of the vector width and of the
block, K down to 1), with strided operands (or B's rows gathered by offset) and the memory
around C untouched; the 8-lane
(AVX2) tile too, in a subprocess, where the host has AVX2. The convs are forced onto the tile
(the module-level thresholds) over the geometries of the conv tests (pads, auto_pad, strides,
dilations, groups, 1-D, bias, FusedConv's activations and residual) at 1 and 2 threads,
checked against onnx.reference, with a spy on the band kernels showing the tile ran."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import pytest
from onnx import helper

from turnout.sdk.semantics.activations import activation
from turnout.tools.testing import one_node_model, provider_session, run_reference
from turnout_numba.kernels import conv as conv_mod
from turnout_numba.kernels import conv_bands, sgemm_tile

needs_tile = pytest.mark.skipif(
    not sgemm_tile.AVAILABLE,
    reason="the host has neither AVX-512 nor AVX2+FMA, or numba compiles for another CPU",
)


@numba.njit(cache=False)
def _tile_product(a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:  # pragma: no cover
    a.turnout_sgemm(a.shape[1], b, b.shape[1], c, c.shape[1], m, n, k)


def _edges(unit: int) -> list[int]:
    return sorted({1, unit - 1, unit, unit + 1, 2 * unit + 3})


def _shapes() -> list[tuple[int, int, int]]:
    rows, lanes, block = sgemm_tile.ROWS, sgemm_tile.LANES, sgemm_tile.BLOCK
    ms = _edges(rows)
    ns = sorted({*_edges(lanes), *_edges(block), block + lanes, 3 * block - 1})
    ks = [1, 2, 7, 144]
    return [(m, n, k) for m in ms for n in ns for k in ks if (m + n + k) % 2 == 0 or k == 144]


def _check_tile(m: int, n: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # operands wider than the product (row strides past m, n, k) and a guard around C
    a = rng.standard_normal((m, k + 3)).astype(np.float32)
    b = rng.standard_normal((k, n + 5)).astype(np.float32)
    c = np.full((m + 2, n + 7), -7.0, np.float32)
    _tile_product(a, b, c, m, n, k)
    want = a[:, :k].astype(np.float64) @ b[:, :n].astype(np.float64)
    np.testing.assert_allclose(c[:m, :n], want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    assert (c[:m, n:] == -7.0).all() and (c[m:] == -7.0).all(), "wrote past the product"


@needs_tile
def test_tile_matches_numpy_over_every_remainder() -> None:
    shapes = _shapes()
    assert len(shapes) > 100
    for i, (m, n, k) in enumerate(shapes):
        _check_tile(m, n, k, i)


@numba.njit(cache=False)
def _rows_product(
    a: Any, b: Any, rows: Any, off: int, c: Any, m: int, n: int, k: int
) -> None:  # pragma: no cover
    a.turnout_sgemm_rows(a.shape[1], b, rows, off, c, c.shape[1], m, n, k)


@needs_tile
def test_gathered_rows_match_numpy_over_every_remainder() -> None:
    """`turnout_sgemm_rows`: B's row q the n floats of `b` (flat) from off + rows[q], rows
    overlapping and out of order as a conv's taps are, over the same remainders."""
    shapes = _shapes()
    for i, (m, n, k) in enumerate(shapes):
        rng = np.random.default_rng(i)
        b = rng.standard_normal((3, 2 * n + 40)).astype(np.float32)
        rows = rng.integers(0, b.size - n - 5, k).astype(np.int64)
        a = rng.standard_normal((m, k + 2)).astype(np.float32)
        c = np.full((m + 1, n + 3), -7.0, np.float32)
        _rows_product(a, b, rows, 5, c, m, n, k)
        flat = b.ravel().astype(np.float64)
        want = a[:, :k].astype(np.float64) @ np.stack([flat[5 + r : 5 + r + n] for r in rows])
        np.testing.assert_allclose(c[:m, :n], want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
        assert (c[:m, n:] == -7.0).all() and (c[m:] == -7.0).all(), "wrote past the product"


@needs_tile
def test_tile_keeps_nonfinite_values_in_their_outputs() -> None:
    m, n, k = sgemm_tile.ROWS + 1, sgemm_tile.BLOCK + 3, 5
    a = np.ones((m, k), np.float32)
    b = np.ones((k, n), np.float32)
    b[2, n - 1] = np.inf
    a[m - 1, 0] = np.nan
    c = np.zeros((m, n), np.float32)
    _tile_product(a, b, c, m, n, k)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(c, want.astype(np.float32))


_AVX2_CHECK = """
import numpy as np, numba
from turnout_numba.kernels import sgemm_tile as st
assert st.LANES == 8 and (st.ROWS, st.VECS) == (6, 2), (st.LANES, st.ROWS, st.VECS)
@numba.njit
def p(a, b, c, m, n, k):
    a.turnout_sgemm(a.shape[1], b, b.shape[1], c, c.shape[1], m, n, k)
rng = np.random.default_rng(0)
for m in (1, 5, 6, 7, 13):
    for n in (1, 7, 8, 9, 16, 17, 33):
        for k in (1, 9):
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            c = np.full((m, n + 4), 3.0, np.float32)
            p(a, b, c, m, n, k)
            assert np.allclose(c[:, :n], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
            assert (c[:, n:] == 3.0).all()
print("ok")
"""


def _host_features() -> dict[str, bool]:
    import llvmlite.binding as ll

    return dict(ll.get_host_cpu_features())


def _child(code: str, **env: str) -> str:
    full = {
        k: v for k, v in os.environ.items() if k not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")
    }
    full.update(env)
    done = subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(
    not (_host_features().get("avx2") and _host_features().get("fma")),
    reason="the 8-lane tile needs AVX2 and FMA on this host",
)
def test_the_avx2_tile_matches_numpy() -> None:
    """The 8-lane tile (what an AVX2 host runs), asked for on this host by the environment."""
    assert _child(_AVX2_CHECK, TURNOUT_SGEMM_LANES="8").strip().endswith("ok")


def test_no_tile_when_numba_compiles_for_another_cpu() -> None:
    code = "from turnout_numba.kernels import sgemm_tile as st; print(st.AVAILABLE, st.LANES)"
    assert _child(code, NUMBA_CPU_NAME="generic").split() == ["False", "0"]
    assert _child(code, TURNOUT_SGEMM_LANES="0").split() == ["False", "0"]


# ------------------------------------------------------------------------------------------
# convs on the tile


def _spy_band_kernels(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for each band kernel call, whether it multiplied with the tile: the parallel
    kernel's calls, and the calls of the serial kernel as a plan binds it (`serial_call`)."""
    ran: list[bool] = []
    real = conv_bands.BandKernel.__call__
    real_bind = conv_bands.BandKernel.serial_call

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        ran.append(self.tile)
        real(self, *args, **kwargs)

    def bind(self: Any, *args: Any) -> Any:
        call = real_bind(self, *args)

        def spied(*call_args: Any) -> None:
            ran.append(self.tile)
            call(*call_args)

        return spied

    monkeypatch.setattr(conv_bands.BandKernel, "__call__", spy)
    monkeypatch.setattr(conv_bands.BandKernel, "serial_call", bind)
    return ran


def _force_tile(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    monkeypatch.setattr(conv_mod, "TILE_MIN_LANES", 1)  # the host's tile, whatever its width
    monkeypatch.setattr(conv_mod, "TILE_MAX_K", 1 << 30)
    monkeypatch.setattr(conv_mod, "TILE_MIN_ROWS", 1)
    monkeypatch.setattr(conv_mod, "TILE_MIN_COLUMNS", 1)
    monkeypatch.setattr(conv_mod, "TILE_MIN_MACS", 0)
    monkeypatch.setattr(conv_mod, "_shift_applies", lambda *_: False)
    if threads > 1:  # the fused band kernel for every conv, several bands each
        monkeypatch.setattr(conv_mod, "FUSED_MIN_COLUMNS", 0)
        monkeypatch.setattr(conv_mod, "fused_band", lambda pixel, ow, oh, t: ow)


def _conv(
    shape: tuple[int, ...],
    m: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
    threads: int,
    act: str = "",
    with_z: bool = False,
    bias: bool = True,
    dtype: Any = np.float32,
) -> tuple[np.ndarray, np.ndarray]:
    """The numba session's result and onnx.reference's (float64, then the activation)."""
    rng = np.random.default_rng(zlib.crc32(repr((shape, m, kernel, attrs)).encode()))
    x = rng.standard_normal(shape).astype(dtype)
    cg = shape[1] // int(attrs.get("group", 1))
    w = (rng.standard_normal((m, cg, *kernel)) * 0.3).astype(dtype)
    names, feeds = ["x", "w"], [x, w]
    if bias:
        names.append("b")
        feeds.append(rng.standard_normal(m).astype(dtype))
    node = helper.make_node("Conv", names, ["y"], **attrs)
    ref = run_reference(node, [v.astype(np.float64) for v in feeds], 17)[0]
    if with_z:
        names.append("z")
        feeds.append(rng.standard_normal(ref.shape).astype(dtype))
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


GEOMETRIES = [
    ((1, 16, 23, 21), 32, (3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 5, 17, 19), 13, (3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 6, 20, 18), 9, (3, 2), {"dilations": [2, 3], "pads": [2, 1, 2, 1]}),
    ((1, 8, 15, 16), 12, (3, 3), {"group": 2, "auto_pad": "SAME_UPPER"}),
    ((1, 12, 14, 13), 18, (5, 5), {"group": 3, "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((1, 7, 12, 40), 17, (1, 1), {}),
    ((2, 8, 9, 11), 24, (1, 1), {"group": 4}),
    ((1, 3, 41, 37), 16, (7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ((1, 10, 100), 25, (4,), {"auto_pad": "VALID"}),
    ((1, 6, 77), 11, (3,), {"pads": [2, 1], "strides": [2], "dilations": [2]}),
    ((1, 4, 13, 13), 1, (3, 3), {"pads": [1, 1, 1, 1]}),
    # one output row read in place (`conv_bands._ONE_ROW`): B's rows packed from the image
    ((1, 8, 50), 10, (3,), {"dilations": [2]}),
    ((1, 6, 3, 30), 12, (3, 3), {}),
    ((1, 5, 4, 20), 9, (3, 3), {"strides": [2, 1], "dilations": [1, 2]}),
]
IDS = ["same", "strided", "dilated", "groups", "groups 5x5 s2", "pointwise",
       "pointwise groups", "stem 7x7", "1-D", "1-D strided dilated", "one output",
       "1-D dilated in place", "one row in place", "one row strided in place"]  # fmt: skip


@needs_tile
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape, m, kernel, attrs", GEOMETRIES, ids=IDS)
@pytest.mark.parametrize(
    "act, with_z, bias",
    [("", False, True), ("", False, False), ("Sigmoid", False, True), ("Relu", True, True)],
    ids=["bias", "no bias", "sigmoid", "relu residual"],
)
def test_convs_on_the_tile_match_the_reference(
    monkeypatch: pytest.MonkeyPatch,
    shape: tuple[int, ...],
    m: int,
    kernel: tuple[int, ...],
    attrs: dict[str, Any],
    threads: int,
    act: str,
    with_z: bool,
    bias: bool,
) -> None:
    _force_tile(monkeypatch, threads)
    ran = _spy_band_kernels(monkeypatch)
    got, want = _conv(shape, m, kernel, attrs, threads, act=act, with_z=with_z, bias=bias)
    assert ran and all(ran), "the conv did not run on the tile"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_tile
@pytest.mark.parametrize("threads", [1, 2])
def test_small_convs_on_the_tile(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """A conv under `SMALL_CONV_COLUMNS` (the serial band kernel's one call) on the tile."""
    _force_tile(monkeypatch, 1)
    ran = _spy_band_kernels(monkeypatch)
    got, want = _conv((1, 9, 6, 7), 10, (3, 3), {"pads": [1, 1, 1, 1]}, threads, act="Relu")
    assert ran and all(ran)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_float64_convs_keep_blas(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    _force_tile(monkeypatch, threads)
    ran = _spy_band_kernels(monkeypatch)
    got, want = _conv((1, 8, 30, 30), 16, (3, 3), {"pads": [1, 1, 1, 1]}, threads,
                      dtype=np.float64)  # fmt: skip
    assert not any(ran)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


needs_wide_tile = pytest.mark.skipif(
    sgemm_tile.LANES < conv_mod.TILE_MIN_LANES,
    reason="convs take the tile only on AVX-512 hosts (conv.TILE_MIN_LANES)",
)


@needs_tile
@needs_wide_tile
@pytest.mark.parametrize("threads", [1, 2])
def test_small_convs_multiply_on_the_tile_at_any_thread_count(
    monkeypatch: pytest.MonkeyPatch, conv_path_spy: Callable[..., list[str]], threads: int
) -> None:
    """SqueezeNet's 32 -> 128 pointwise conv at 27x27 is a small conv (3 M multiply-adds, under
    `POOL_SERIAL_MACS`): at 1 thread its whole image is one call of the serial band kernel; at
    2 it shares bands of its pixels between the threads (`_split_band`). Both multiply on the
    register tile with the shipped thresholds (at 2 threads it once took BLAS over the whole
    image: 48 against 41 us on a Zen 5)."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("numba has fewer threads on this machine")
    ran = _spy_band_kernels(monkeypatch)
    paths = conv_path_spy(("_small_conv", "_banded_conv", "_gemm_conv"))
    got, want = _conv((1, 32, 27, 27), 128, (1, 1), {}, threads, act="Relu")
    assert paths == ["_small_conv" if threads == 1 else "_banded_conv"]
    assert ran == [True]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_tile
@needs_wide_tile
@pytest.mark.parametrize("threads", [1, 2])
def test_unsplit_products_stay_on_the_tile_with_threads(
    monkeypatch: pytest.MonkeyPatch, conv_path_spy: Callable[..., list[str]], threads: int
) -> None:
    """A text CNN's 64 -> 100 1-D conv of width 5 over 128 steps: above the small-conv size
    (320 x 124 columns), under `POOL_SERIAL_MACS` (4 M), and one output row, so no fused
    bands. Its product runs whole on the caller's thread at any count: on the register tile,
    as without threads (at 2 threads it took BLAS, 61 against 46 us on a Zen 5)."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("numba has fewer threads on this machine")
    ran = _spy_band_kernels(monkeypatch)
    paths = conv_path_spy(
        ("_tiled_conv", "_banded_conv", "_gemm_conv", "_shifted_conv", "_small_conv")
    )
    got, want = _conv((1, 64, 128), 100, (5,), {}, threads, act="Relu")
    assert paths == ["_tiled_conv"]
    assert ran == [True]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_no_convs_on_a_narrow_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conv_mod.sgemm_tile, "LANES", 8)
    assert not conv_mod._tile_applies(np.dtype(np.float32), 32, 144, 1600)


@needs_tile
@needs_wide_tile
def test_the_shipped_rule() -> None:
    """Thin float32 products take the tile; too few channels or pixels, too long a K, too
    small a product (OpenBLAS's small-matrix kernel's), or float64 keep BLAS; a stride-1 3x3
    conv takes im2col on the tile over shifted products only where the shifted products
    waste more than `TILE_SHIFT_MAX_WASTE`."""
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    applies = conv_mod._tile_applies
    assert applies(f32, 32, 144, 1600)
    assert not applies(f64, 32, 144, 1600)
    assert not applies(f32, conv_mod.TILE_MIN_ROWS - 1, 144, 1600)
    assert not applies(f32, 32, conv_mod.TILE_MAX_K + 1, 1600)
    assert applies(f32, 256, 9216, 196)  # 1024 channels 3x3 (measured faster)
    assert not applies(f32, 32, 144, conv_mod.TILE_MIN_COLUMNS - 1)
    # OpenBLAS's small-matrix kernel: up to 100^3 multiply-adds
    assert applies(f32, 64, 64, 245) and not applies(f32, 64, 64, 244)
    shift = conv_mod._shift_applies
    if conv_mod.find_gemm(f32) is not None:
        w = (64, 64, 3, 3)
        assert shift(w, 1, [1, 1], f32, 27, 1, False)
        assert not shift(w, 1, [1, 1], f32, 27, 1, True)
        assert shift(w, 1, [1, 1], f32, 28, 1, True)
    # shifted products: a band of rows Wp wide, K = C*KH*KW
    shift_tile = conv_mod._shift_tile
    assert shift_tile(f32, (64, 64, 3, 3), 64, (56, 56), 1, 1)
    assert not shift_tile(f64, (64, 64, 3, 3), 64, (56, 56), 1, 1)
    assert not shift_tile(f32, (4, 64, 3, 3), 64, (56, 56), 1, 1)  # too few outputs
    assert not shift_tile(f32, (8, 32, 3, 3), 32, (3, 28), 1, 1)  # under TILE_MIN_MACS


@needs_tile
@needs_wide_tile
@pytest.mark.parametrize("threads", [1, 2])
def test_thin_convs_take_the_tile_with_the_shipped_thresholds(
    monkeypatch: pytest.MonkeyPatch, conv_path_spy: Callable[..., list[str]], threads: int
) -> None:
    """16 -> 32 channels 3x3 at 48x48 (K = 144), dilated 2 so that the shifted products
    (whose padded columns would be 8% of the output) leave it to im2col, above the small-conv
    size: one call of the serial band kernel on the tile at 1 thread, the fused band kernel
    on the tile at 2."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("numba has fewer threads on this machine")
    ran = _spy_band_kernels(monkeypatch)
    paths = conv_path_spy(("_tiled_conv", "_banded_conv", "_gemm_conv", "_shifted_conv"))
    attrs = {"pads": [2, 2, 2, 2], "dilations": [2, 2]}
    got, want = _conv((1, 16, 48, 48), 32, (3, 3), attrs, threads)
    assert paths == ["_tiled_conv" if threads == 1 else "_banded_conv"]
    assert ran and all(ran)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_tile
@needs_wide_tile
@pytest.mark.parametrize(
    "shape, m, group",
    [((1, 24, 56, 56), 112, 4), ((1, 272, 14, 14), 272, 4)],
    ids=["shufflenet 6 -> 28 a group", "shufflenet 68 -> 68 a group"],
)
def test_products_under_blas_small_kernel_keep_blas(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], m: int, group: int
) -> None:
    """Shufflenet's group-4 pointwise convs: each group's product is under `TILE_MIN_MACS`
    (0.5 and 0.9M multiply-adds), which OpenBLAS's small-matrix kernel does faster: BLAS."""
    ran = _spy_band_kernels(monkeypatch)
    got, want = _conv(shape, m, (1, 1), {"group": group}, 1, act="Relu")
    assert not any(ran), "a product under TILE_MIN_MACS ran on the tile"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_tile
@needs_wide_tile
@pytest.mark.parametrize("threads", [1, 2])
def test_wide_stride1_convs_take_shifted_products_on_the_tile(
    monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """64 -> 64 channels 3x3 at 28x28 with the shipped thresholds, Winograd aside (it takes
    this conv on AVX-512 hosts: `winograd_applies`): shifted products (2 padded columns in 30,
    under `TILE_SHIFT_MAX_WASTE`), their bands multiplied on the tile."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("numba has fewer threads on this machine")
    monkeypatch.setattr(conv_mod, "winograd_applies", lambda *args: False)
    ran: list[bool] = []
    real = conv_mod._shifted_conv

    def spy(*args: Any) -> None:
        ran.append(args[5].tile)
        real(*args)

    monkeypatch.setattr(conv_mod, "_shifted_conv", spy)
    got, want = _conv((1, 64, 28, 28), 64, (3, 3), {"pads": [1, 1, 1, 1]}, threads, act="Relu")
    assert ran == [True]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
