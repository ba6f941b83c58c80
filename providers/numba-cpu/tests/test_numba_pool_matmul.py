"""`pool_matmul`: products split on numba's threads through numpy's own `cblas_?gemm`.

Checked against np.matmul for both split directions, strided operands and outputs (a conv
band writes a slice of its output's rows), and float64; the kernel must really be the one that
ran (a spy on the compiled split), and layouts it cannot take must fall back, not misread.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from turnout.sdk.blas_threads import BlasThreads
from turnout_numba import cblas
from turnout_numba.kernels import pool_matmul as pm

pytestmark = pytest.mark.skipif(
    cblas.find_gemm("float32") is None,
    reason="numpy's BLAS exports no cblas_sgemm here (or threadpoolctl is missing)",
)


@pytest.fixture
def two_thread_run(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A managed 2-thread run (BLAS held to one thread), with calls of the split counted."""
    calls: list[tuple[int, ...]] = []
    real = pm._kernel

    def spy(dtype: Any) -> Any:
        kern = real(dtype)

        def counted(*args: Any) -> Any:
            calls.append(args[4].shape)
            return kern(*args)

        return counted

    monkeypatch.setattr(pm, "_kernel", spy)
    import numba

    threads = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    changed = BlasThreads(2).enter()
    try:
        yield calls
    finally:
        BlasThreads.exit(changed)
        numba.set_num_threads(threads)


def _operands(m: int, k: int, n: int, dtype: Any = np.float32) -> tuple[Any, Any]:
    rng = np.random.default_rng(m * 7 + n)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(64, 576, 504), (512, 1152, 49), (200, 512, 300), (33, 1000, 333)],
    ids=["columns", "rows", "square-ish", "odd"],
)
def test_split_product_equals_numpy(two_thread_run: Any, m: int, k: int, n: int) -> None:
    a, b = _operands(m, k, n)
    out = np.full((m, n), np.nan, np.float32)
    got = pm.pool_matmul(a, b, out=out)
    assert got is out
    assert two_thread_run == [(m, n)]
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-3)


def test_strided_operands_and_output(two_thread_run: Any) -> None:
    """A conv band: a column slice of the image's panel into a slice of the output's rows."""
    a, b_full = _operands(96, 300, 900)
    b = b_full[:, 100:700]
    y = np.full((2, 96, 900), np.nan, np.float32)
    pm.pool_matmul(a, b, out=y[1, :, 100:700])
    assert two_thread_run == [(96, 600)]
    np.testing.assert_allclose(y[1, :, 100:700], a @ b, rtol=1e-4, atol=1e-3)
    assert np.isnan(y[0]).all() and np.isnan(y[1, :, :100]).all() and np.isnan(y[1, :, 700:]).all()


@pytest.fixture
def tile_calls(two_thread_run: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`two_thread_run`, with the calls of the split on the register tile counted."""
    from turnout_numba.kernels import sgemm_tile

    if not sgemm_tile.AVAILABLE:
        pytest.skip("this host has no register tile (AVX-512 or AVX2 with FMA)")
    calls: list[tuple[int, ...]] = []
    real = pm._tile_kernel

    def spy() -> Any:
        kern = real()

        def counted(*args: Any) -> Any:
            calls.append(args[2].shape)
            return kern(*args)

        return counted

    monkeypatch.setattr(pm, "_tile_kernel", spy)
    return calls


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(64, 576, 504), (1000, 512, 169), (203, 400, 60), (33, 1000, 333), (9, 500, 1001)],
    ids=["columns", "rows", "rows-odd", "columns-odd", "columns-narrow-rows"],
)
def test_split_on_the_tile_equals_numpy(
    tile_calls: Any, two_thread_run: Any, m: int, k: int, n: int
) -> None:
    """Rows split in whole tiles and columns in whole blocks, with the remainders of both."""
    a, b = _operands(m, k, n)
    out = np.full((m, n), np.nan, np.float32)
    assert pm.pool_matmul(a, b, out=out, tile=True) is out
    assert tile_calls == [(m, n)] and two_thread_run == []
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-3)


def test_split_on_the_tile_reads_and_writes_strided_rows(tile_calls: Any) -> None:
    """A conv band on the tile: a column slice of the panel into a slice of the output."""
    a, b_full = _operands(96, 300, 900)
    b = b_full[:, 100:700]
    y = np.full((2, 96, 900), np.nan, np.float32)
    pm.pool_matmul(a, b, out=y[1, :, 100:700], tile=True)
    assert tile_calls == [(96, 600)]
    np.testing.assert_allclose(y[1, :, 100:700], a @ b, rtol=1e-4, atol=1e-3)
    assert np.isnan(y[0]).all() and np.isnan(y[1, :, :100]).all() and np.isnan(y[1, :, 700:]).all()


def test_float64_and_allocated_output(two_thread_run: Any) -> None:
    if cblas.find_gemm("float64") is None:
        pytest.skip("numpy's BLAS exports no cblas_dgemm here")
    a, b = _operands(128, 256, 256, np.float64)
    got = pm.pool_matmul(a, b)
    assert two_thread_run == [(128, 256)]
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize(
    "case", ["small", "one-row", "transposed-a", "reversed-b", "aliased-out", "float16"]
)
def test_what_it_cannot_take_falls_back(two_thread_run: Any, case: str) -> None:
    a, b = _operands(200, 512, 300)
    out = None
    if case == "small":
        a, b = _operands(16, 64, 64)
    elif case == "one-row":
        a, b = _operands(1, 9216, 4096)
    elif case == "transposed-a":
        a = np.ascontiguousarray(a.T).T  # columns contiguous: no row-major leading dimension
    elif case == "reversed-b":
        b = b[:, ::-1]
    elif case == "aliased-out":
        a, b = _operands(256, 256, 256)
        out = b  # numpy buffers an output that overlaps an input
    elif case == "float16":
        a, b = a.astype(np.float16), b.astype(np.float16)
    want = np.matmul(a, b)  # before `out` (an input, in one case) is written
    got = pm.pool_matmul(a, b, out=out)
    assert two_thread_run == []
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-1 if case == "float16" else 1e-3)


def test_outside_a_threaded_run_is_plain_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pm, "_kernel", lambda dtype: pytest.fail("split outside a run"))
    a, b = _operands(200, 512, 300)
    np.testing.assert_allclose(pm.pool_matmul(a, b), a @ b, rtol=1e-4, atol=1e-3)


def test_a_two_thread_session_splits_its_large_product_on_one_blas_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a 2-thread numba session, a 17 M MatMul goes through the split with BLAS held to one
    thread, a 0.5 M one does not; BLAS's count before the run is back after it."""
    import numba
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import turnout
    from turnout.sdk.blas_threads import _blas_controls
    from turnout.tools.testing import cpu_session

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread on this machine: nothing is split")
    if not _blas_controls():
        pytest.skip("no BLAS library is held in this process (threadpoolctl finds none)")
    # numpy's BLAS, the one runs hold: a second OpenBLAS (the cblas tests load one) is not
    get_count = _blas_controls()[0][0]
    seen: list[tuple[tuple[int, ...], int]] = []
    real = pm._kernel

    def spy(dtype: Any) -> Any:
        kern = real(dtype)

        def counted(*args: Any) -> Any:
            seen.append((args[4].shape, get_count()))
            return kern(*args)

        return counted

    monkeypatch.setattr(pm, "_kernel", spy)
    # float32 products take the register tile on AVX-512 hosts (`tile_matmul`): BLAS's here
    from turnout_numba.kernels import tile_matmul as tile_mod

    monkeypatch.setattr(tile_mod, "tile_matmul_applies", lambda *args: False)
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), "wb"),
        numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "ws"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["y", "wb"], ["b"], name="big"),
            helper.make_node("MatMul", ["x", "ws"], ["s"], name="small"),
        ],
        "two",
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 64]),
        ],
        [
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [256, 256]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [256, 32]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = turnout.InferenceSession(
        model.SerializeToString(),
        providers=[("NumbaExecutionProvider", {"intra_op_num_threads": 2})],
    )
    sources = {a.node: a.source for a in sess.partition_report().assignments}
    assert sources["big"] == "numba", sources
    feeds = {
        "y": rng.standard_normal((256, 256)).astype(np.float32),
        "x": rng.standard_normal((256, 64)).astype(np.float32),
    }
    before = get_count()
    got = sess.run(None, feeds)
    assert seen == [((256, 256), 1)]
    assert get_count() == before
    for g, w in zip(
        got,
        cpu_session(onnx.load_from_string(model.SerializeToString())).run(None, feeds),
        strict=True,
    ):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3)
