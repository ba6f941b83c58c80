"""One numba session shared by 8 Python threads gives, run for run, what it gives one thread.

A shorter form (8 threads x 500 runs) of the issue's stress check (8 x 1000 runs, with
`benchmarks/thread_stress.py`: zero differences on both models with 0, 1 and 2 intra-op
threads). Per-run state (thread counts, BLAS limits, buffers) must not leak between concurrent
runs; every output is compared bit for bit with the single-thread result for the same input.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import numpy as np
import onnx
import pytest

import turnout
from turnout.tools.concurrency import run_from_threads
from turnout.tools.testing import cpu_session
from turnout_testbed import zoo


def _small_classifier() -> tuple[bytes, str, tuple[int, ...]]:
    return zoo.small_classifier().SerializeToString(), "x", (4, 32)


def _tiny_cnn() -> tuple[bytes, str, tuple[int, ...]]:
    """Conv/BatchNormalization/Relu/MaxPool/Gemm/Softmax, shipped with turnout."""
    return (
        files("turnout.tools.models").joinpath("tiny_cnn.onnx").read_bytes(),
        "image",
        (2, 1, 28, 28),
    )


@pytest.mark.parametrize("model", [_small_classifier, _tiny_cnn], ids=["classifier", "tiny_cnn"])
@pytest.mark.parametrize("threads", [0, 2], ids=["threads-default", "threads-2"])
def test_shared_session_is_thread_safe(model: Any, threads: int) -> None:
    data, name, shape = model()
    opts = {"intra_op_num_threads": threads} if threads else {}
    sess = turnout.InferenceSession(data, providers=[("NumbaExecutionProvider", opts)])
    assert "numba" in {a.source for a in sess.partition_report().assignments}
    rng = np.random.default_rng(1)
    feeds = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(16)]
    result = run_from_threads(sess, feeds, threads=8, runs=500)
    assert result.clean, result


def _split_products() -> bytes:
    """A 3x3 Conv of 32 -> 64 channels at 56x56 (58 M multiply-adds, in bands) and a MatMul of
    [200, 512] @ [512, 300] (31 M): both above `BLAS_SERIAL_MACS`, so split into blocks."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((64, 32, 3, 3)) * 0.1).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((512, 300)).astype(np.float32), "m")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("MatMul", ["a", "m"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "split",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 56, 56]),
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [200, 512]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        [w, m],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data: bytes = model.SerializeToString()
    return data


def test_split_products_from_many_threads_give_the_single_thread_result() -> None:
    """Products split between the caller and the BLAS helper threads, from 4 Python threads at
    once into one 2-thread session: every output equals the lone run's, bit for bit, and the
    reference within float32 rounding."""
    sess = turnout.InferenceSession(
        _split_products(), providers=[("NumbaExecutionProvider", {"intra_op_num_threads": 2})]
    )
    rng = np.random.default_rng(3)
    feeds = [
        {
            "x": rng.standard_normal((1, 32, 56, 56)).astype(np.float32),
            "a": rng.standard_normal((200, 512)).astype(np.float32),
        }
        for _ in range(6)
    ]
    result = run_from_threads(sess, feeds, threads=4, runs=15)
    assert result.clean, result
    ref = cpu_session(onnx.load_from_string(_split_products()))
    for f in feeds[:2]:
        for got, want in zip(sess.run(None, f), ref.run(None, f), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
