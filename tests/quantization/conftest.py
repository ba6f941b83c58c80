"""Small float models and calibration data for the turnout.tools.quantization tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.tools.models import build_tiny_cnn


@pytest.fixture
def tiny_cnn() -> onnx.ModelProto:
    """Conv-BN-Relu-MaxPool x2, Flatten, Gemm (transB=0), Softmax over [batch, 1, 28, 28]."""
    return build_tiny_cnn()


@pytest.fixture
def classifier() -> onnx.ModelProto:
    """MatMul-Add-Relu-MatMul-Softmax over a symbolic batch of width 16 (opset 18)."""
    zoo = pytest.importorskip("turnout_testbed.zoo", reason="pip install -e ./testbed")
    return zoo.small_classifier(width=16)


def gemm_model(
    rng: np.random.Generator, alpha: float, beta: float, trans_b: int
) -> onnx.ModelProto:
    """One Gemm over x [4, 12] with a constant weight and bias, then Relu."""
    w = rng.standard_normal((8, 12) if trans_b else (12, 8)).astype(np.float32)
    c = rng.standard_normal(8).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node(
                "Gemm", ["x", "w", "c"], ["g"], "gemm", alpha=alpha, beta=beta, transB=trans_b
            ),
            helper.make_node("Relu", ["g"], ["y"], "relu"),
        ],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def gemm() -> Callable[..., onnx.ModelProto]:
    return gemm_model


def batches(
    model: onnx.ModelProto, count: int, seed: int = 0, batch: int = 4
) -> list[dict[str, np.ndarray]]:
    """`count` seeded feeds of standard normal values for the model's (float) inputs."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        feed = {}
        for vi in model.graph.input:
            dims = [
                d.dim_value if d.HasField("dim_value") else batch
                for d in vi.type.tensor_type.shape.dim
            ]
            feed[vi.name] = rng.standard_normal(dims).astype(np.float32)
        out.append(feed)
    return out


@pytest.fixture
def make_batches() -> Callable[..., list[dict[str, np.ndarray]]]:
    return batches


@pytest.fixture
def text_cnn() -> tuple[onnx.ModelProto, Callable[[int], dict[str, np.ndarray]]]:
    """A small text CNN (embedding Gather, Conv1D, Concat, Gemm, Softmax) and its feeds."""
    apps = pytest.importorskip("turnout_testbed.apps", reason="pip install -e ./testbed")
    text_cnn_feeds, text_cnn_like = apps.text_cnn_feeds, apps.text_cnn_like

    model = text_cnn_like(seq=16, vocab=200, dim=16, filters=8, classes=5)
    return model, lambda seed: text_cnn_feeds(seq=16, vocab=200, batch=4, seed=seed)
