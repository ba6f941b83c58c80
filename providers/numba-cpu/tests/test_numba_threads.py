"""One numba session shared by 8 Python threads gives, run for run, what it gives one thread.

A shorter form (8 threads x 500 runs) of the issue's stress check (8 x 1000 runs: zero
differences on both models with 0, 1 and 2 intra-op threads). Per-run state (thread counts,
BLAS limits, buffers) must not leak between concurrent runs. Threads share inputs too, and
every output is compared bit for bit with the single-thread result for the same input.
"""

from __future__ import annotations

import threading
from importlib.resources import files
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout

THREADS = 8
RUNS = 500


def _mlp() -> tuple[bytes, str, tuple[int, ...]]:
    """MatMul/Add/Relu/MatMul/Softmax with a symbolic batch."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in (("w1", (16, 32)), ("b1", (32,)), ("w2", (32, 10)))
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["z"]),
        helper.make_node("Softmax", ["z"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString(), "x", (4, 16)


def _tiny_cnn() -> tuple[bytes, str, tuple[int, ...]]:
    """Conv/BatchNormalization/Relu/MaxPool/Gemm/Softmax, shipped with turnout."""
    return files("turnout.models").joinpath("tiny_cnn.onnx").read_bytes(), "image", (2, 1, 28, 28)


@pytest.mark.parametrize("model", [_mlp, _tiny_cnn], ids=["mlp", "tiny_cnn"])
@pytest.mark.parametrize("threads", [0, 2], ids=["threads-default", "threads-2"])
def test_shared_session_is_thread_safe(model: Any, threads: int) -> None:
    data, feed, shape = model()
    opts = {"intra_op_num_threads": threads} if threads else {}
    sess = turnout.InferenceSession(data, providers=[("NumbaExecutionProvider", opts)])
    assert "numba" in {a.source for a in sess.partition_report().assignments}
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(THREADS * 2)]
    want = [sess.run(None, {feed: x})[0] for x in xs]
    differing = [0] * THREADS
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(RUNS):
                k = (t * 2 + i) % len(xs)
                if not np.array_equal(sess.run(None, {feed: xs[k]})[0], want[k]):
                    differing[t] += 1
        except BaseException as e:  # reported below, with the thread's count
            errors.append(e)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors[:3]
    assert differing == [0] * THREADS
