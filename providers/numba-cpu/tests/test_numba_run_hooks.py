"""The numba provider's run hooks: numba's thread count is the session's during a run and what
it was after; when it already is the session's, the hooks leave it alone (no set per run)."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pytest
from onnx import TensorProto, helper

from turnout.tools.testing import provider_session


def _relu_session() -> tuple[Any, Any]:
    """A 2-thread numba session of one Relu on [2, 3], and its numba provider."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=2)
    (ep,) = [p for p in sess._engine.providers if type(p).__name__ == "NumbaExecutionProvider"]
    return sess, ep


def test_numba_thread_count_set_for_a_run_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here")
    sess, ep = _relu_session()
    seen: list[int] = []
    start = ep.on_run_start

    def spy() -> None:
        start()
        seen.append(numba.get_num_threads())

    ep.on_run_start = spy
    x = np.ones((2, 3), np.float32)
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        sess.run(None, {"x": x})  # 1 -> 2 for the run, 1 again after
        assert numba.get_num_threads() == 1
        numba.set_num_threads(2)
        sets: list[int] = []
        real_set = numba.set_num_threads
        monkeypatch.setattr(numba, "set_num_threads", lambda n: (sets.append(n), real_set(n)))
        sess.run(None, {"x": x})  # already 2: left as it is
        monkeypatch.undo()
        assert sets == [] and numba.get_num_threads() == 2
    finally:
        numba.set_num_threads(before)
    assert seen == [2, 2]


def test_failed_run_start_hands_the_run_lock_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under workqueue a parallel run holds the process's run lock; a start that fails after
    taking it (numba's thread query raising) must release it, or every later run hangs."""
    import threading

    from turnout_numba import provider as numba_provider

    _, ep = _relu_session()
    if not ep.ctx.parallel:
        pytest.skip("the session runs serial here (one core): it takes no run lock")
    lock = threading.RLock()
    monkeypatch.setattr(numba_provider, "run_lock", lambda: lock)

    def broken() -> int:
        raise RuntimeError("thread query failed")

    monkeypatch.setattr(numba_provider.numba, "get_num_threads", broken)
    with pytest.raises(RuntimeError, match="thread query failed"):
        ep.on_run_start()
    taken: list[bool] = []
    other = threading.Thread(target=lambda: taken.append(lock.acquire(timeout=5)))
    other.start()
    other.join()
    assert taken == [True]
