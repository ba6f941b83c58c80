"""The BLAS thread policy: which products get a session's threads (decisions, never times)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout import blas_threads
from turnout.blas_threads import BLAS_SERIAL_MACS, GUARD, blas_threads_for
from turnout.thread_contention import StallGuard

BIG = (256, 256, 256)  # 16.8 M multiply-adds: above the serial limit
SMALL = (100, 320, 124)  # text_cnn_like's largest convolution GEMM, 4 M


def test_the_limits_sit_where_the_measured_models_need_them() -> None:
    assert SMALL[0] * SMALL[1] * SMALL[2] < BLAS_SERIAL_MACS <= BIG[0] * BIG[1] * BIG[2]


def test_small_products_and_one_thread_sessions_stay_serial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(GUARD, "serial_best", {"k": 1e-3})
    monkeypatch.setattr(GUARD, "serial_until", 0.0)
    assert blas_threads_for(BLAS_SERIAL_MACS, 2, "k") == 2
    assert blas_threads_for(BLAS_SERIAL_MACS - 1, 2, "k") == 1
    assert blas_threads_for(10 * BLAS_SERIAL_MACS, 1, "k") == 1


def test_a_shape_runs_serial_on_its_second_call_then_threaded() -> None:
    guard = StallGuard()
    assert guard.threads_for("k", 2) == 2  # the first run is not slowed
    guard.record("k", 2, 1e-3)
    assert guard.threads_for("k", 2) == 1  # the serial time
    guard.record("k", 1, 1.5e-3)
    assert guard.threads_for("k", 2) == 2
    assert guard.serial_best == {"k": 1.5e-3}


def test_a_shape_first_seen_while_held_serial_takes_its_serial_time_then() -> None:
    guard = StallGuard()
    guard.record("k", 1, 1e-3)
    guard.record("k", 2, 5e-3)
    assert guard.threads_for("new", 2) == 1
    guard.record("new", 1, 2e-3)
    assert guard.serial_best["new"] == 2e-3


def test_a_multithreaded_call_slower_than_serial_holds_calls_serial() -> None:
    guard = StallGuard()
    guard.record("k", 1, 1e-3)
    guard.record("j", 1, 1e-3)
    guard.record("k", 2, 5e-3)  # the helper thread was late: the other core is taken
    assert guard.held_serial()
    assert guard.threads_for("k", 2) == 1
    assert guard.threads_for("j", 2) == 1  # the core is taken for every product
    assert guard.backoff == StallGuard.FACTOR * StallGuard.FIRST_BACKOFF_S


def test_the_backoff_grows_while_calls_lose_and_shrinks_on_wins() -> None:
    guard = StallGuard()
    guard.record("k", 1, 1e-3)
    for _ in range(20):
        guard.record("k", 2, 5e-3)
    assert guard.backoff == StallGuard.MAX_BACKOFF_S
    guard.record("k", 2, 0.5e-3)
    assert guard.backoff == StallGuard.MAX_BACKOFF_S / StallGuard.FACTOR
    guard.record("k", 2, 0.9e-3)  # neither a loss nor a clear win: unchanged
    assert guard.backoff == StallGuard.MAX_BACKOFF_S / StallGuard.FACTOR
    for _ in range(20):
        guard.record("k", 2, 0.5e-3)
    assert guard.backoff == StallGuard.FIRST_BACKOFF_S


def test_the_serial_time_is_the_best_seen() -> None:
    guard = StallGuard()
    guard.record("k", 1, 3e-3)
    guard.record("k", 1, 1e-3)
    guard.record("k", 1, 2e-3)
    assert guard.serial_best["k"] == 1e-3


WS = np.random.default_rng(0).standard_normal((320, 124)).astype(np.float32)
WB = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)


def _two_products() -> onnx.ModelProto:
    """x [100, 320] @ WS [320, 124] and y [256, 256] @ WB [256, 256]."""
    inits = [numpy_helper.from_array(WS, "ws"), numpy_helper.from_array(WB, "wb")]
    nodes = [
        helper.make_node("MatMul", ["x", "ws"], ["s"], name="small"),
        helper.make_node("MatMul", ["y", "wb"], ["b"], name="big"),
    ]
    graph = helper.make_graph(
        nodes,
        "two",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [100, 320]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256]),
        ],
        [
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [100, 124]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [256, 256]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("numpy_only", ["1", "0"])
def test_a_two_thread_run_gives_each_product_its_threads(
    numpy_only: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a 2-thread run, the 4 M product multiplies on one BLAS thread and the 17 M one on
    two (serial times known); the count before the run is back after it."""
    threadpoolctl = pytest.importorskip("threadpoolctl", reason="it sets BLAS's thread count")
    libs = threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers
    if not libs:
        pytest.skip("no BLAS library is loaded in this process")
    seen: list[tuple[tuple[int, ...], int]] = []
    real = np.matmul

    class Spy:
        def matmul(self, a: Any, b: Any, out: Any = None) -> Any:
            seen.append((a.shape, libs[0].get_num_threads()))
            return real(a, b, out=out)

    monkeypatch.setattr(blas_threads, "np", Spy())
    monkeypatch.setattr(GUARD, "serial_best", {})
    monkeypatch.setattr(GUARD, "serial_until", 0.0)
    for shapes in (((100, 320), (320, 124)), ((256, 256), (256, 256))):
        GUARD.serial_best[shapes] = 1.0  # serial times known, and never lost to
    before = libs[0].get_num_threads()
    so = turnout.SessionOptions()
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.turnout.cpu_numpy_only", numpy_only)
    sess = turnout.InferenceSession(
        _two_products().SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.standard_normal((100, 320)).astype(np.float32),
        "y": rng.standard_normal((256, 256)).astype(np.float32),
    }
    s, b = sess.run(None, feeds)
    np.testing.assert_allclose(s, real(feeds["x"], WS), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(b, real(feeds["y"], WB), rtol=1e-4, atol=1e-4)
    assert sorted(seen) == [((100, 320), 1), ((256, 256), 2)]
    assert libs[0].get_num_threads() == before


class _FakeController:
    """A threadpoolctl controller of a BLAS whose count is not set through OpenBLAS's symbols."""

    def __init__(self, internal_api: str, threading_layer: str) -> None:
        self.internal_api = internal_api
        self.threading_layer = threading_layer
        self.dynlib = object()
        self.count = 4

    def get_num_threads(self) -> int:
        return self.count

    def set_num_threads(self, n: int) -> None:
        self.count = n


@pytest.mark.parametrize(("api", "layer"), [("mkl", "intel"), ("openblas", "openmp")])
def test_other_blas_libraries_are_set_through_their_controller(api: str, layer: str) -> None:
    """MKL, BLIS and OpenMP builds of OpenBLAS (whose count is per thread) keep threadpoolctl's
    own calls."""
    lib = _FakeController(api, layer)
    get, set_ = blas_threads._fast_controls(lib)
    set_(2)
    assert get() == 2 == lib.count
