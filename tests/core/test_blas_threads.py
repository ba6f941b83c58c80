"""The BLAS thread policy: which products are split, how the caller and the helper threads share
the blocks, and that every split product equals np.matmul (decisions and values, never times)."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.engine.tiers import stop_all_builds
from turnout.sdk import blas_threads
from turnout.sdk.blas_threads import (
    BLAS_SERIAL_MACS,
    BlasThreads,
    blas_matmul,
    blas_threads_for,
    run_threads,
)

BIG = (256, 256, 256)  # 16.8 M multiply-adds: above the serial limit
SMALL = (100, 320, 124)  # text_cnn_like's largest convolution GEMM, 4 M


def test_the_limits_sit_where_the_measured_models_need_them() -> None:
    assert SMALL[0] * SMALL[1] * SMALL[2] < BLAS_SERIAL_MACS <= BIG[0] * BIG[1] * BIG[2]


def test_small_products_and_one_thread_sessions_stay_serial() -> None:
    assert blas_threads_for(BLAS_SERIAL_MACS, 2) == 2
    assert blas_threads_for(BLAS_SERIAL_MACS - 1, 2) == 1
    assert blas_threads_for(10 * BLAS_SERIAL_MACS, 1) == 1


@pytest.fixture
def two_thread_run() -> Any:
    """The state of a managed 2-thread run (BLAS's count is restored after)."""
    run = BlasThreads(2)
    changed = run.enter()
    blas_threads._RUN.threads = 2  # also without a BLAS found (then nothing is set)
    try:
        yield
    finally:
        BlasThreads.exit(changed)


def test_each_python_thread_has_its_own_run_budget(two_thread_run: None) -> None:
    """A one-thread session's run starting and ending on another thread leaves this run's
    budget alone (it was process-wide, and the other run's end reset it to serial)."""
    seen: list[int] = []

    def other_session_run() -> None:
        seen.append(run_threads())  # no managed run on this thread
        changed = BlasThreads(1).enter()
        BlasThreads.exit(changed)

    t = threading.Thread(target=other_session_run)
    t.start()
    t.join()
    assert seen == [0]
    assert run_threads() == 2


def _blas_counts() -> list[int]:
    """The thread counts of the BLAS libraries runs hold (those loaded when the process's first
    session looked), read from the libraries themselves. Another BLAS loaded later (a second
    OpenBLAS that some import brings) is not one turnout's products call, nor one it holds."""
    pytest.importorskip(
        "threadpoolctl", reason="BLAS's count is held only with threadpoolctl (the threads extra)"
    )
    controls = blas_threads._blas_controls()
    if not controls:
        pytest.skip("threadpoolctl finds no BLAS library in this numpy")
    return [get() for get, _ in controls]


@pytest.fixture(autouse=True)
def no_run_left_open() -> Any:
    """No other run in the process: an earlier test's compiled-tier build, whose warm-up run
    holds BLAS's process-wide count while it runs, is stopped first. Each test ends with this
    thread outside any run: a test that failed between a run's enter and its exit would
    otherwise leave every later test of the worker in a nested run."""
    stop_all_builds()
    yield
    leaked = blas_threads._RUN.depth
    for _ in range(leaked):
        BlasThreads.exit()
    assert leaked == 0, f"the test left {leaked} run(s) entered on this thread"


def test_overlapping_runs_of_two_threads_hold_blas_at_one_until_the_last_ends() -> None:
    """BLAS's count is process-wide: once a second Python thread's run begins it is one, the
    first run to end leaves it there for the other, and the last restores what BLAS had."""
    before = _blas_counts()
    first = BlasThreads(2).enter()
    entered, leave = threading.Event(), threading.Event()
    seen: dict[str, list[int]] = {}

    def other_run() -> None:
        changed = BlasThreads(2).enter()
        seen["both"] = _blas_counts()
        entered.set()
        leave.wait()
        BlasThreads.exit(changed)

    t = threading.Thread(target=other_run)
    try:
        assert set(_blas_counts()) == {2}  # alone: the session's count until it splits products
        t.start()
        assert entered.wait(60)
        assert set(seen["both"]) == {1}
    finally:
        leave.set()
        if t.ident is not None:
            t.join(60)
        after_other = _blas_counts()
        BlasThreads.exit(first)
    assert set(after_other) == {1}  # the other run ended; this one is still splitting
    assert _blas_counts() == before


def test_a_second_provider_of_the_run_leaves_the_first_ones_count() -> None:
    """The CPU provider behind turnout-numba enters the same run nested: the count and the
    budget stay the first provider's until the outer exit restores BLAS."""
    before = _blas_counts()
    outer = BlasThreads(2).enter()
    counts = _blas_counts()
    budget = blas_threads._RUN.threads
    inner = BlasThreads(1).enter()
    assert _blas_counts() == counts and blas_threads._RUN.threads == budget
    BlasThreads.exit(inner)
    assert blas_threads._RUN.depth == 1
    BlasThreads.exit(outer)
    assert blas_threads._RUN.depth == 0 and _blas_counts() == before


def test_a_blas_call_that_fails_in_enter_leaves_no_run_behind() -> None:
    """A BLAS control that raises while a run starts: the error reaches the caller, and the
    thread is not left inside a run (every later run would be taken for a nested one and
    leave BLAS's count alone)."""

    def broken() -> int:
        raise OSError("BLAS get_num_threads failed")

    limits = BlasThreads(1)
    limits._controls = [(broken, lambda n: None)]
    with pytest.raises(OSError, match="get_num_threads"):
        limits.enter()
    assert blas_threads._RUN.depth == 0 and blas_threads._SHARED.active == 0
    BlasThreads.exit(BlasThreads(1).enter())  # a run after it starts and ends as usual
    assert blas_threads._RUN.depth == 0


class _FakeBlas:
    """A BLAS library's count, and every count a run set on it. Its calls let other Python
    threads run, as ctypes calls into a real BLAS do."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.sets: list[int] = []

    def get(self) -> int:
        time.sleep(0)
        return self.count

    def set(self, n: int) -> None:
        time.sleep(0)
        self.sets.append(n)
        self.count = n


def _limits(threads: int, lib: _FakeBlas) -> BlasThreads:
    limits = BlasThreads(threads)
    limits._controls = [(lib.get, lib.set)]
    limits._setters = (lib.set,)
    return limits


def _run(limits: BlasThreads, split: bool = False) -> None:
    """One run's hooks as a numba session calls them: its own, then the CPU provider's nested
    enter; `split`: a kernel splits a product in between (BLAS to one thread)."""
    limits.enter()
    BlasThreads(limits.threads).enter()
    if split:
        run_threads()
    BlasThreads.exit()
    BlasThreads.exit()


def test_a_count_already_at_the_sessions_is_neither_set_nor_restored() -> None:
    """A process started with one BLAS thread running one-thread sessions: each run reads the
    count and sets nothing (the setters are a tenth of a tiny model's fixed cost)."""
    lib = _FakeBlas(1)
    for _ in range(3):
        _run(_limits(1, lib))
    assert lib.sets == [] and lib.count == 1
    assert blas_threads._RUN.depth == 0 and blas_threads._SHARED.active == 0


def test_a_count_set_by_the_split_of_a_product_is_restored() -> None:
    """A 2-thread session found BLAS at two (nothing set at entry); splitting a product sets
    one mid-run, and the run's end puts two back."""
    lib = _FakeBlas(2)
    _run(_limits(2, lib), split=True)
    assert lib.sets == [1, 2] and lib.count == 2


def test_the_callers_count_of_each_run_is_held_and_given_back() -> None:
    """The count is read at every run's start: a change the caller makes between runs is the
    one restored after the next run, never an older one."""
    lib = _FakeBlas(3)
    limits = _limits(1, lib)
    _run(limits)
    assert lib.sets == [1, 3] and lib.count == 3
    lib.count = 1  # the caller's own change (not through turnout)
    _run(limits)
    assert lib.sets == [1, 3] and lib.count == 1  # nothing set, and 3 not restored
    lib.count = 5
    _run(limits)
    assert lib.sets == [1, 3, 1, 5] and lib.count == 5


@pytest.mark.parametrize("blas", ["fake", "found"])
def test_runs_entering_from_many_threads_hold_one_and_restore_the_count_once(blas: str) -> None:
    """Eight Python threads start and end runs of one-thread sessions (two providers each) at
    once: inside every run BLAS is at one, and after the last the caller's count is back."""
    if blas == "fake":
        lib = _FakeBlas(4)
        controls = [(lib.get, lib.set)]
    else:
        controls = list(blas_threads._blas_controls())
        if not controls:
            pytest.skip("no BLAS library found in this process (threadpoolctl finds none)")
    get, set_ = controls[0]
    before = get()
    set_(3)
    try:
        start = threading.Barrier(8)
        seen: list[int] = []
        errors: list[BaseException] = []

        def runs() -> None:
            limits = BlasThreads(1)
            limits._controls = controls
            try:
                start.wait(10)
                for _ in range(300):
                    limits.enter()
                    BlasThreads(1).enter()
                    seen.append(get())
                    BlasThreads.exit()
                    BlasThreads.exit()
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=runs) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert len(seen) == 8 * 300 and set(seen) == {1}
        assert get() == 3 and blas_threads._SHARED.active == 0
    finally:
        set_(before)


@pytest.fixture
def blas_libs() -> Any:
    """The (get, set) count controls of the BLAS libraries runs hold, their counts put back
    after the test."""
    before = _blas_counts()
    controls = blas_threads._blas_controls()
    yield controls
    for (_, set_), n in zip(controls, before):
        set_(n)


def test_a_one_thread_session_runs_blas_on_one_and_gives_the_callers_count_back(
    blas_libs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a session's run (every installed provider's hooks, turnout-numba's too): BLAS is
    at one while the plan runs, and after the run at the count the caller had just before it,
    the caller's count changed between runs included."""
    so = turnout.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.turnout.wait_for_compiled_tier", "1")
    sess = turnout.InferenceSession(
        _two_products().SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    plan = sess._engine.plan
    real = plan.run
    inside: list[list[int]] = []

    def spy(*args: Any) -> Any:
        inside.append(_blas_counts())
        return real(*args)

    monkeypatch.setattr(plan, "run", spy)
    rng = np.random.default_rng(2)
    feeds = {
        "x": rng.standard_normal((100, 320)).astype(np.float32),
        "y": rng.standard_normal((256, 256)).astype(np.float32),
    }
    for caller in (3, 1, 2):
        for _, set_ in blas_libs:
            set_(caller)
        s, _ = sess.run(None, feeds)
        assert inside[-1] == [1] * len(blas_libs)
        assert _blas_counts() == [caller] * len(blas_libs)
    assert len(inside) == 3
    np.testing.assert_allclose(s, feeds["x"] @ WS, rtol=1e-4, atol=1e-4)


RNG = np.random.default_rng(3)

# (A shape, B shape): split along columns, along rows, odd sizes (blocks of 16 and a short
# last one), batched with broadcast leading dimensions, a batched B, K = 1
SPLIT = [
    ((64, 1152), (1152, 504)),
    ((1000, 512), (512, 169)),
    ((129, 1001), (1001, 131)),
    ((1, 12, 128, 64), (1, 12, 64, 128)),
    ((3, 1, 100, 300), (5, 300, 200)),
    ((12, 128, 64), (64, 1000)),
    ((300, 1), (1, 30000)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("sa", "sb"), SPLIT)
def test_split_products_equal_numpy(
    two_thread_run: None, sa: tuple[int, ...], sb: tuple[int, ...], dtype: Any
) -> None:
    a = RNG.standard_normal(sa).astype(dtype)
    b = RNG.standard_normal(sb).astype(dtype)
    y = blas_matmul(a, b)
    assert y.dtype == dtype
    np.testing.assert_allclose(y, np.matmul(a, b), rtol=1e-4, atol=1e-4)


def test_a_split_product_writes_into_a_strided_out(two_thread_run: None) -> None:
    """As Conv does: a band of output columns of a group's output channels, a view of y."""
    w = RNG.standard_normal((64, 288)).astype(np.float32)
    panel = RNG.standard_normal((288, 900)).astype(np.float32)
    y = np.full((2, 128, 1000), np.nan, np.float32)
    blas_matmul(w, panel, out=y[1, 64:128, 50:950])
    np.testing.assert_allclose(y[1, 64:128, 50:950], w @ panel, rtol=1e-4, atol=1e-4)
    assert np.isnan(y[1, 64:128, :50]).all() and np.isnan(y[1, 64:128, 950:]).all()
    assert np.isnan(y[0]).all() and np.isnan(y[1, :64]).all()


def test_products_that_are_not_split_are_numpys(two_thread_run: None) -> None:
    """Integers, mixed dtypes, vectors, an out that overlaps an input, and shape errors."""
    ai = RNG.integers(-9, 9, (300, 300))
    np.testing.assert_array_equal(blas_matmul(ai, ai), ai @ ai)
    a = RNG.standard_normal((300, 300)).astype(np.float32)
    b64 = a.astype(np.float64)
    np.testing.assert_allclose(blas_matmul(a, b64), a @ b64, rtol=1e-6)
    v = RNG.standard_normal(300).astype(np.float32)
    np.testing.assert_allclose(blas_matmul(a, v), a @ v, rtol=1e-4, atol=1e-4)
    c = a.copy()
    expect = a @ a
    blas_matmul(c, a, out=c)  # numpy buffers an overlapping out
    np.testing.assert_allclose(c, expect, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError):
        blas_matmul(a, RNG.standard_normal((299, 300)).astype(np.float32))
    with pytest.raises(ValueError):
        blas_matmul(a, a, out=np.empty((300, 301), np.float32))


def test_nan_and_inf_pass_through_the_blocks(two_thread_run: None) -> None:
    a = RNG.standard_normal((256, 256)).astype(np.float32)
    b = RNG.standard_normal((256, 256)).astype(np.float32)
    a[3, 7] = np.nan
    b[5, 200] = np.inf
    np.testing.assert_array_equal(np.isnan(blas_matmul(a, b)), np.isnan(a @ b))


def _blocks(out: Any, a: Any, b: Any) -> list[tuple[Any, Any, Any]]:
    return [(a, b[:, j : j + 32], out[:, j : j + 32]) for j in range(0, b.shape[1], 32)]


def test_the_caller_does_every_block_a_helper_has_not_taken() -> None:
    """A helper that is not scheduled yet costs nothing: the caller takes all blocks and does
    not wait; the helper that comes later finds none."""
    a = RNG.standard_normal((32, 64)).astype(np.float32)
    b = RNG.standard_normal((64, 96)).astype(np.float32)
    out = np.zeros((32, 96), np.float32)
    job = blas_threads._Job(_blocks(out, a, b))
    job.call()
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    job.help({})  # a late helper
    assert job.state == [blas_threads._FREE] * 3
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_a_block_whose_helper_stalls_is_taken_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper descheduled in the middle of its block: once the caller has waited as long as
    one of its own blocks took, it multiplies that block itself and returns; what the helper
    computes after that never reaches `out`."""
    a = RNG.standard_normal((32, 64)).astype(np.float32)
    b = RNG.standard_normal((64, 96)).astype(np.float32)
    out = np.zeros((32, 96), np.float32)
    job = blas_threads._Job(_blocks(out, a, b))
    real = np.matmul
    started, resume, helper_done = threading.Event(), threading.Event(), threading.Event()

    def help_then_signal() -> None:
        job.help({})
        helper_done.set()

    helper = threading.Thread(target=help_then_signal)

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        def matmul(self, x: Any, y: Any, out: Any = None) -> Any:
            if threading.current_thread() is helper:
                started.set()
                resume.wait(10)
                out[...] = -1.0  # a stale result: must be dropped
                return out
            return real(x, y, out=out)

    monkeypatch.setattr(blas_threads, "np", Spy())
    helper.start()
    assert started.wait(10)  # the helper holds block 0
    job.call()
    np.testing.assert_allclose(out, real(a, b), rtol=1e-5, atol=1e-5)
    assert job.state[0] == blas_threads._TAKEN_BACK
    resume.set()
    assert helper_done.wait(10)
    helper.join(10)
    np.testing.assert_allclose(out, real(a, b), rtol=1e-5, atol=1e-5)


def test_a_helper_takes_blocks_and_the_caller_waits_for_them(
    two_thread_run: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's first block is held until a helper has finished one; every block runs on
    one BLAS thread, and the product is complete when blas_matmul returns."""
    controls = blas_threads._blas_controls()
    count = controls[0][0] if controls else (lambda: 1)  # no BLAS held: the split still runs
    real = np.matmul
    helped = threading.Event()
    calls: list[tuple[bool, int]] = []
    caller = threading.get_ident()

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        def matmul(self, a: Any, b: Any, out: Any = None) -> Any:
            mine = threading.get_ident() == caller
            calls.append((mine, count()))
            if mine:
                helped.wait(10)
            y = real(a, b, out=out)
            if not mine:
                helped.set()
            return y

    monkeypatch.setattr(blas_threads, "np", Spy())
    a = RNG.standard_normal(BIG[:2]).astype(np.float32)
    b = RNG.standard_normal(BIG[1:]).astype(np.float32)
    y = blas_matmul(a, b)
    np.testing.assert_allclose(y, real(a, b), rtol=1e-4, atol=1e-4)
    assert len(calls) == 2 * blas_threads.BLOCKS_PER_THREAD
    assert {mine for mine, _ in calls} == {True, False}
    assert {count for _, count in calls} == {1}


def test_an_error_in_a_helpers_block_reaches_the_caller() -> None:
    job = blas_threads._Job([(np.ones((2, 3)), np.ones((4, 5)), np.empty((2, 5)))])
    job.help({})
    assert isinstance(job.error, ValueError)
    assert not job.finished.locked()  # the caller does not wait for it


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


def test_a_two_thread_run_splits_the_large_product_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a 2-thread run of the numpy kernels, the 4 M product is one call and the 17 M
    one is cut into blocks, all on one BLAS thread; the count before the run is back after it.
    (A block taken back from a descheduled helper is computed twice: seen on a busy CI.)
    (turnout-numba splits its products on numba's threads: its test_numba_pool_matmul.)"""
    _blas_counts()  # skips where no BLAS is held
    count = blas_threads._blas_controls()[0][0]  # the first held library's getter
    seen: list[tuple[tuple[int, ...], int]] = []
    real = np.matmul

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        def matmul(self, a: Any, b: Any, out: Any = None) -> Any:
            seen.append((b.shape, count()))
            return real(a, b, out=out)

    monkeypatch.setattr(blas_threads, "np", Spy())
    before = count()
    so = turnout.SessionOptions()
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.turnout.cpu_numpy_only", "1")
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
    # the 17 M product in 4 column blocks, the 4 M one whole, all on one BLAS thread; a block
    # whose helper was descheduled mid-way (a busy machine) is taken back and computed again
    # by the caller, so a block may be seen twice
    assert seen.count(((320, 124), 1)) == 1
    blocks = [s for s in seen if s != ((320, 124), 1)]
    assert set(blocks) == {((256, 64), 1)} and 4 <= len(blocks) <= 8, seen
    assert count() == before


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
