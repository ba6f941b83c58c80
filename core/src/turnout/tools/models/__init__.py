"""Small example models shipped inside the package, so `turnout run tiny-cnn` works anywhere.

`build_tiny_cnn()` is how tiny_cnn.onnx was made (seeded weights): rerun `python -m
turnout.tools.models` (its __main__) to regenerate it.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from turnout._submodules import submodule

__all__ = ["MODELS_DIR", "build_tiny_cnn", "shipped_model"]

MODELS_DIR = Path(__file__).parent


def shipped_model(name: str) -> Path | None:
    """Path of a shipped model by short name (`tiny-cnn`), or None."""
    path = MODELS_DIR / f"{name.replace('-', '_')}.onnx"
    return path if path.is_file() else None


def build_tiny_cnn(seed: int = 0) -> onnx.ModelProto:
    """A 28x28 digit-classifier shaped CNN: Conv-BN-Relu-MaxPool x2, Gemm, Softmax."""
    rng = np.random.default_rng(seed)

    def init(name: str, *shape: int, scale: float = 0.1) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    inits = [
        init("w1", 8, 1, 3, 3),
        init("b1", 8),
        numpy_helper.from_array(np.ones(8, np.float32), "bn_scale"),
        init("bn_bias", 8),
        init("bn_mean", 8),
        numpy_helper.from_array(np.abs(rng.standard_normal(8)).astype(np.float32) + 0.5, "bn_var"),
        init("w2", 16, 8, 3, 3),
        init("b2", 16),
        init("fc_w", 16 * 7 * 7, 10, scale=0.05),
        init("fc_b", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node(
            "BatchNormalization",
            ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
            ["n1"],
            name="bn1",
        ),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"
        ),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node(
            "MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2], name="pool2"
        ),
        helper.make_node("Flatten", ["p2"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 28, 28])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.producer_name = "turnout.tools.models"
    onnx.checker.check_model(model)
    return model


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
