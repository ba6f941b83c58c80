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
import pytest

import turnout
from turnout.concurrency import run_from_threads
from turnout.models import zoo


def _small_classifier() -> tuple[bytes, str, tuple[int, ...]]:
    return zoo.small_classifier().SerializeToString(), "x", (4, 32)


def _tiny_cnn() -> tuple[bytes, str, tuple[int, ...]]:
    """Conv/BatchNormalization/Relu/MaxPool/Gemm/Softmax, shipped with turnout."""
    return files("turnout.models").joinpath("tiny_cnn.onnx").read_bytes(), "image", (2, 1, 28, 28)


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
