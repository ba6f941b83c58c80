"""Tiered kernels (turnout.engine.tiers): a CPU session is ready on the numpy kernels, its
host providers' kernels build in the background and take over at a run boundary.

A fake host provider whose kernels cannot be built until the test says so makes each step
observable; the real numba provider is used where its compiler and cache are the point (exit
while compiling, two processes sharing one cache).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.engine.tiers import WAIT_ENV, WAIT_KEY, stop_all_builds
from turnout.sdk import plugins
from turnout_testbed.gated_host import BUILD_TIMEOUT, HOST, Gate, serving_cpu

pytestmark = pytest.mark.cpu_means_host  # the host providers serve CPU requests here

CPU = "CPUExecutionProvider"
X = np.array([-2, -1, 1, 2], np.float32)
GATE = Gate()  # the current test's (each fixture makes a new one: a late build keeps its own)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Only the slow host serves CPU requests; the gate starts closed; no waiting by default."""
    monkeypatch.delenv(WAIT_ENV, raising=False)
    global GATE
    GATE = Gate()
    with serving_cpu(GATE, stop_all_builds):
        yield


def _model() -> onnx.ModelProto:
    """Neg -> Abs: the host takes Neg, the numpy kernels Abs."""
    nodes = [
        helper.make_node("Neg", ["x"], ["a"], name="neg"),
        helper.make_node("Abs", ["a"], ["y"], name="abs"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _placed(sess: turnout.InferenceSession) -> dict[str, str]:
    return {a.node: a.provider for a in sess.partition_report().assignments}


def _run(sess: turnout.InferenceSession) -> None:
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.abs(X))


def test_session_is_ready_before_the_host_has_built_anything(host: None) -> None:
    sess = turnout.InferenceSession(_model(), providers=[CPU])  # the gate is closed
    assert set(_placed(sess).values()) == {CPU}
    tier = sess.partition_report().tier
    assert tier is not None and (tier.tier, tier.building, tier.hosts) == ("numpy", True, [HOST])
    assert "building in the background" in sess.partition_report().to_text()
    _run(sess)
    _run(sess)  # still the numpy tier: the build has not finished
    assert set(_placed(sess).values()) == {CPU}
    assert sess.get_providers() == [CPU]


def test_compiled_tier_takes_over_at_the_next_run(host: None) -> None:
    sess = turnout.InferenceSession(_model(), providers=[CPU])
    _run(sess)
    _run(sess)
    assert sess._engine._loaded is not None  # the build reads it
    GATE.open.set()
    assert sess._engine.wait_for_compiled_tier(BUILD_TIMEOUT)
    assert set(_placed(sess).values()) == {CPU}  # not adopted between runs by itself
    _run(sess)
    assert _placed(sess) == {"neg": HOST, "abs": CPU}
    tier = sess.partition_report().tier
    assert tier is not None and (tier.tier, tier.since_run) == ("compiled", 2)
    assert "compiled tier (SlowHostExecutionProvider) since run 2" in (
        sess.partition_report().to_text()
    )
    assert sess.partition_report().to_dict()["tier"]["tier"] == "compiled"
    assert GATE.built == 1
    assert sess._engine._loaded is None  # let go once nothing builds from it


def test_the_compiler_starts_when_the_first_run_ends(
    host: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first result comes from the numpy kernels alone, not beside a compiler."""
    import time

    monkeypatch.setattr("turnout.engine.session.TIER_HOLD_S", BUILD_TIMEOUT)
    GATE.open.set()  # the fake compiler would finish at once if it started
    sess = turnout.InferenceSession(_model(), providers=[CPU])
    time.sleep(0.2)
    assert GATE.built == 0, "the build started before the first run"
    _run(sess)
    assert sess._engine._tier_build is not None
    assert sess._engine._tier_build.wait(BUILD_TIMEOUT)
    assert GATE.built == 1


@pytest.mark.parametrize("how", ["config", "environment"])
def test_waiting_for_the_compiled_tier_at_creation(
    host: None, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    so = turnout.SessionOptions()
    if how == "config":
        so.add_session_config_entry(WAIT_KEY, "1")
    else:
        monkeypatch.setenv(WAIT_ENV, "1")
    GATE.open.set()
    sess = turnout.InferenceSession(_model(), so, providers=[CPU])
    assert _placed(sess) == {"neg": HOST, "abs": CPU}
    tier = sess.partition_report().tier
    assert tier is not None and (tier.tier, tier.since_run) == ("compiled", 0)


def test_bad_wait_value_is_a_clear_error(host: None) -> None:
    so = turnout.SessionOptions()
    so.add_session_config_entry(WAIT_KEY, "soon")
    with pytest.raises(turnout.InvalidArgument, match=WAIT_KEY):
        turnout.InferenceSession(_model(), so, providers=[CPU])


def test_a_build_that_fails_leaves_the_numpy_tier_and_says_why(
    host: None, caplog: pytest.LogCaptureFixture
) -> None:
    GATE.fail = True
    sess = turnout.InferenceSession(_model(), providers=[CPU])
    GATE.open.set()
    _stays_on_numpy(sess, "compiler crashed", caplog)
    _run(sess)


def _stays_on_numpy(
    sess: turnout.InferenceSession, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After its build ended, a run keeps the numpy tier, and the report and the log say why."""
    assert sess._engine.wait_for_compiled_tier(BUILD_TIMEOUT)
    _run(sess)
    assert set(_placed(sess).values()) == {CPU}
    tier = sess.partition_report().tier
    assert tier is not None and tier.tier == "numpy" and not tier.building
    assert why in tier.error
    assert why in caplog.text


def test_the_build_runs_the_first_runs_inputs_before_the_tier_takes_over(host: None) -> None:
    """What a compiled kernel prepares for the shapes it meets is done in the build thread:
    the compiled plan ran once on the first run's inputs before any run adopted it."""
    sess = turnout.InferenceSession(_model(), providers=[CPU])
    _run(sess)
    GATE.open.set()
    assert sess._engine.wait_for_compiled_tier(BUILD_TIMEOUT)
    assert GATE.calls == 1  # the warm-up, in the build thread
    _run(sess)
    assert _placed(sess) == {"neg": HOST, "abs": CPU}
    assert GATE.calls == 2


def test_a_tier_that_fails_the_first_runs_inputs_is_not_adopted(
    host: None, caplog: pytest.LogCaptureFixture
) -> None:
    GATE.fail_calls = True
    sess = turnout.InferenceSession(_model(), providers=[CPU])
    _run(sess)
    GATE.open.set()
    _stays_on_numpy(sess, "failed on these inputs", caplog)


def test_placing_again_drops_the_build_of_the_old_placement(host: None) -> None:
    sess = turnout.InferenceSession(_model(), providers=[CPU])
    old = sess._engine._tier_build
    sess.set_providers([CPU])
    assert sess._engine._tier_build is not old
    GATE.open.set()
    assert sess._engine.wait_for_compiled_tier(BUILD_TIMEOUT)
    _run(sess)
    assert _placed(sess)["neg"] == HOST


def test_sessions_created_from_several_threads_at_once(host: None) -> None:
    sessions: list[turnout.InferenceSession] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            sess = turnout.InferenceSession(_model(), providers=[CPU])
            _run(sess)
            sessions.append(sess)
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    GATE.open.set()
    for t in threads:
        t.join(BUILD_TIMEOUT)
    assert not errors and len(sessions) == 4
    for sess in sessions:
        assert sess._engine.wait_for_compiled_tier(BUILD_TIMEOUT)
        _run(sess)
        assert _placed(sess)["neg"] == HOST


def _run_in_forked_child(sess: turnout.InferenceSession, queue: Any) -> None:
    """Run in a child forked while the parent's build waited at the closed gate: the child
    has no build thread, so it must build its own."""
    GATE.open.set()
    try:
        _run(sess)
        done = sess._engine.wait_for_compiled_tier(BUILD_TIMEOUT)
        _run(sess)
        queue.put((done, _placed(sess)["neg"]))
    except BaseException as e:
        queue.put((False, repr(e)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")
def test_a_child_forked_while_the_tier_builds_builds_its_own(host: None) -> None:
    sess = turnout.InferenceSession(_model(), providers=[CPU])
    _run(sess)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_run_in_forked_child, args=(sess, queue))
    child.start()
    result = queue.get(timeout=BUILD_TIMEOUT)
    child.join(BUILD_TIMEOUT)
    assert result == (True, HOST)
    assert child.exitcode == 0
    GATE.open.set()  # the parent's own build goes on as before
    assert sess._engine.wait_for_compiled_tier(BUILD_TIMEOUT)
    _run(sess)
    assert _placed(sess)["neg"] == HOST


# --- the real numba provider: its compiler, its cache, and the interpreter's exit


def _numba_or_skip() -> None:
    factory = plugins.registry.find("NumbaExecutionProvider")
    if factory is None or not plugins.registry.probe(factory).ok:
        pytest.skip("turnout-numba is not installed or numba cannot load here")


_CHILD = textwrap.dedent(
    """
    import sys, numpy as np, turnout
    from turnout_testbed import zoo
    wait, exit_at_once = sys.argv[1] == "wait", sys.argv[2] == "exit"
    so = turnout.SessionOptions()
    so.add_session_config_entry("session.turnout.wait_for_compiled_tier", "1" if wait else "0")
    sess = turnout.InferenceSession(zoo.small_classifier().SerializeToString(), so)
    if exit_at_once:
        sys.exit(0)  # the compiled tier is still building
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    y = sess.run(None, {"x": x})[0]
    from turnout_numba import cache
    hosts = sorted({a.provider for a in sess.partition_report().assignments})
    print(",".join(hosts), cache.compile_count(), float(np.abs(y).sum()))
    """
)


def _child(cache: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TURNOUT_CACHE_DIR": str(cache)}
    env.pop(WAIT_ENV, None)
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    return out


def test_interpreter_exit_while_compiling_is_clean(tmp_path: Path) -> None:
    """A process that exits while numba compiles in the background exits with its own status,
    and leaves a cache the next process uses."""
    _numba_or_skip()
    pytest.importorskip("turnout_testbed", reason="the model comes from turnout-testbed")
    _finish(_child(tmp_path, "background", "exit"))
    hosts, _, total = _finish(_child(tmp_path, "wait", "run")).split()
    assert "NumbaExecutionProvider" in hosts and float(total) > 0


def test_two_processes_compile_into_one_cache(tmp_path: Path) -> None:
    """Both compile the same kernels into one empty cache at once; both answer alike, and a
    third process compiles nothing."""
    _numba_or_skip()
    pytest.importorskip("turnout_testbed", reason="the model comes from turnout-testbed")
    first, second = _child(tmp_path, "wait", "run"), _child(tmp_path, "wait", "run")
    answers = [_finish(first).split(), _finish(second).split()]
    assert answers[0][0] == answers[1][0] and "NumbaExecutionProvider" in answers[0][0]
    assert float(answers[0][2]) == pytest.approx(float(answers[1][2]), rel=1e-5)
    hosts, compiled, total = _finish(_child(tmp_path, "wait", "run")).split()
    assert hosts == answers[0][0]
    assert int(compiled) == 0, "the third process compiled instead of loading the cache"
    assert float(total) == pytest.approx(float(answers[0][2]), rel=1e-5)


def _dynamic_conv1d() -> onnx.ModelProto:
    """x [1, 8, T] (T unknown) -> Conv 1-D, 16 filters of width 3 -> Relu."""
    w = np.random.default_rng(0).standard_normal((16, 8, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "dynamic_conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_run_that_adopts_numbas_tier_compiles_and_loads_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model whose shapes are dynamic: numba's convolution picks its path (and loads or
    compiles that path's kernel) at the first call for each input shape. The build ran the
    first run's inputs, so the run that adopts the tier loads and compiles nothing (it loaded
    20-45 ms of cached kernels there, or compiled for seconds on an empty cache)."""
    _numba_or_skip()
    from turnout_numba import cache

    monkeypatch.delenv(WAIT_ENV, raising=False)
    so = turnout.SessionOptions()
    so.intra_op_num_threads = 1
    sess = turnout.InferenceSession(_dynamic_conv1d(), so, providers=[CPU])
    x = np.random.default_rng(1).standard_normal((1, 8, 37)).astype(np.float32)
    (want,) = sess.run(None, {"x": x})  # the numpy tier
    assert sess._engine.wait_for_compiled_tier(120)
    loads: list[Any] = []

    def refused(*args: Any, **kwargs: Any) -> Any:
        loads.append(args[:1])
        raise AssertionError("a kernel was loaded or compiled inside a run")

    monkeypatch.setattr(cache, "jit", refused)
    monkeypatch.setattr(cache, "load_source", refused)
    (got,) = sess.run(None, {"x": x})
    tier = sess.partition_report().tier
    assert tier is not None and tier.tier == "compiled", tier
    assert loads == []
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
