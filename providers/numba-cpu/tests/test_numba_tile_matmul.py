"""Gemm and MatMul products on the register tile (`kernels/tile_matmul.py`): the kernel alone
against float64 numpy over row, column and thread-split remainders, and whole nodes against
onnx.reference with the path they take."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.tools.testing import one_node_model, provider_session, run_reference
from turnout_numba.kernels import gemm as gemm_mod
from turnout_numba.kernels import rnn as rnn_mod
from turnout_numba.kernels import sgemm_tile
from turnout_numba.kernels.pool_matmul import POOL_SERIAL_MACS
from turnout_numba.kernels.tile_matmul import MIN_ROWS, tile_matmul_applies, tile_matmul_kernel
from turnout_numba.registry import BuildContext

needs_wide_tile = pytest.mark.skipif(
    not (sgemm_tile.AVAILABLE and sgemm_tile.LANES >= 16),
    reason="products take the tile only on AVX-512 hosts where numba compiles for the host",
)


@needs_wide_tile
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_tile_matmul_over_every_remainder(parts: int) -> None:
    """Rows around the tile's row block, columns around its column block and the thread
    split's block-aligned ranges, K from 1: equal to float64 numpy, nothing written past N."""
    kern = tile_matmul_kernel(BuildContext(parallel=parts > 1))
    run = kern.parallel if parts > 1 else kern.serial
    rng = np.random.default_rng(parts)
    block = sgemm_tile.BLOCK
    for m in (MIN_ROWS, sgemm_tile.ROWS - 1, sgemm_tile.ROWS + 1, 3 * sgemm_tile.ROWS + 5):
        for k in (1, 7, 300):
            for n in (1, block - 1, block, block + 1, 2 * block + 5, 4 * block + 17):
                a = rng.standard_normal((m, k)).astype(np.float32)
                b = rng.standard_normal((k, n)).astype(np.float32)
                c = np.full((m, n), 7.0, np.float32)
                run(a, b, c, parts)
                want = a.astype(np.float64) @ b.astype(np.float64)
                np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * max(1.0, k**0.5))


def test_tile_matmul_applies_only_where_measured() -> None:
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    wide = sgemm_tile.AVAILABLE and sgemm_tile.LANES >= 16
    assert tile_matmul_applies(f32, MIN_ROWS, 64, True) == wide
    assert not tile_matmul_applies(f32, MIN_ROWS - 1, 64, True)  # the GEMV's rows
    assert not tile_matmul_applies(f64, 64, 64, True)
    assert not tile_matmul_applies(f32, 64, 64, False)  # a B kept transposed
    assert not tile_matmul_applies(f32, 64, 0, True)


def _spy_tile(monkeypatch: pytest.MonkeyPatch, module: Any = gemm_mod) -> list[int]:
    """The thread count each tile product of the run was split over (1: serial), for the
    kernels `module` (Gemm/MatMul's, or the recurrent ops') builds."""
    ran: list[int] = []
    real = module.tile_matmul_kernel

    def make(ctx: BuildContext) -> Any:
        kern = real(ctx)

        class Spied:
            serial = staticmethod(lambda a, b, c, p: (ran.append(1), kern.serial(a, b, c, p)))
            parallel = staticmethod(lambda a, b, c, p: (ran.append(p), kern.parallel(a, b, c, p)))

        return Spied()

    monkeypatch.setattr(module, "tile_matmul_kernel", make)
    return ran


@needs_wide_tile
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "op, a_shape, b_shape, attrs",
    [
        ("MatMul", (64, 784), (784, 1024), {}),
        ("MatMul", (2, 9, 40), (40, 33), {}),
        ("Gemm", (16, 300), (10, 300), {"transB": 1}),
        ("Gemm", (300, 5), (300, 70), {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    ],
    ids=["mlp layer", "N-D A", "transB with bias", "transA, alpha, beta"],
)
def test_products_of_a_few_rows_take_the_tile(
    monkeypatch: pytest.MonkeyPatch,
    threads: int,
    op: str,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    attrs: dict[str, Any],
) -> None:
    """Dense layers of at least `MIN_ROWS` rows multiply on the tile, split between the
    threads where `pool_matmul` would split them (50 M multiply-adds at 2 threads), with the
    Gemm's alpha, beta, C and transposes applied as onnx.reference applies them."""
    ran = _spy_tile(monkeypatch)
    rng = np.random.default_rng(len(a_shape) * 100 + b_shape[-1])
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    names, feeds = ["a", "b"], [a, b]
    if op == "Gemm":
        rows = a_shape[1] if attrs.get("transA") else a_shape[0]
        cols = b_shape[0] if attrs.get("transB") else b_shape[1]
        names.append("c")
        feeds.append(rng.standard_normal(cols if rows != 300 else (rows, cols)).astype(np.float32))
    node = helper.make_node(op, names, ["y"], **attrs)
    sess = provider_session(
        one_node_model(node, feeds, 17), "NumbaExecutionProvider", intra_op_num_threads=threads
    )
    ran.clear()  # the kernels' first calls, made when the session was built
    got = sess.run(None, dict(zip(names, feeds)))[0]
    want = run_reference(node, [f.astype(np.float64) for f in feeds], 17)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    macs = int(np.prod(want.shape)) * (a_shape[0] if attrs.get("transA") else a_shape[-1])
    split = threads > 1 and macs >= POOL_SERIAL_MACS
    assert ran == [threads if split else 1]


@needs_wide_tile
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_recurrent_input_projections_take_the_tile(
    monkeypatch: pytest.MonkeyPatch, op: str
) -> None:
    """A bidirectional recurrent node's input projection (12 steps: 12 rows) multiplies on the
    tile, and its outputs are onnx.reference's."""
    ran = _spy_tile(monkeypatch, rnn_mod)
    rng = np.random.default_rng(5)
    steps, inputs, hidden, gates = 12, 20, 16, 4 if op == "LSTM" else 3
    x = rng.standard_normal((steps, 1, inputs)).astype(np.float32)
    w = (0.3 * rng.standard_normal((2, gates * hidden, inputs))).astype(np.float32)
    r = (0.3 * rng.standard_normal((2, gates * hidden, hidden))).astype(np.float32)
    b = rng.standard_normal((2, 2 * gates * hidden)).astype(np.float32)
    node = helper.make_node(
        op, ["x", "w", "r", "b"], ["y"], hidden_size=hidden, direction="bidirectional"
    )
    feeds = [x, w, r, b]
    sess = provider_session(one_node_model(node, feeds, 17), "NumbaExecutionProvider")
    ran.clear()
    got = sess.run(None, {"x": x, "w": w, "r": r, "b": b})[0]
    want = run_reference(node, [f.astype(np.float64) for f in feeds], 17)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert ran == [1]
