"""`onnxruntime.datasets`: tiny example models shipped with the package, by file name.

turnout builds its own (the `build_*` functions here; `python -m turnout.api.datasets` rewrites the
files): they have the names, inputs and outputs of onnxruntime's examples, with turnout's weights.
- `mul_1.onnx`: Y = X * W, X float [3, 2], W = [[1, 2], [3, 4], [5, 6]].
- `sigmoid.onnx`: y = Sigmoid(x), x float [3, 4, 5].
- `logreg_iris.onnx`: a 3-class logistic regression over 2 features (ai.onnx.ml
  LinearClassifier, Normalizer, ZipMap): outputs `label` int64 [N] and `probabilities`,
  a sequence of {class: probability} maps.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from turnout._submodules import submodule

__all__ = ["DATASETS_DIR", "build_logreg_iris", "build_mul_1", "build_sigmoid", "get_example"]

DATASETS_DIR = Path(__file__).parent
_IR_VERSION = 7  # old enough for any onnxruntime that reads these


def get_example(name: str) -> str:
    """Path of a shipped example model (`"sigmoid.onnx"`); FileNotFoundError for others."""
    path = DATASETS_DIR / os.path.basename(name)
    if path.suffix != ".onnx" or not path.is_file():
        raise FileNotFoundError(f"Unable to find example '{name}'")
    return str(path)


def _model(graph: onnx.GraphProto, *opsets: tuple[str, int]) -> onnx.ModelProto:
    ids = [helper.make_opsetid(domain, version) for domain, version in opsets]
    model = helper.make_model(graph, opset_imports=ids, producer_name="turnout")
    model.ir_version = _IR_VERSION
    onnx.checker.check_model(model)
    return model


def build_mul_1() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(1, 7, dtype=np.float32).reshape(3, 2), "W")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "W"], ["Y"], name="mul_1")],
        "mul_1",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])],
        [w],
    )
    return _model(graph, ("", 7))


def build_sigmoid() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"], name="sigmoid")],
        "sigmoid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])],
    )
    return _model(graph, ("", 9))


def build_logreg_iris() -> onnx.ModelProto:
    # weights chosen by hand: class 0 for small first features, class 2 for large ones
    coefficients = [-2.0, 1.5, 0.25, -0.75, 1.75, -0.5]  # [class][feature], row-major
    intercepts = [3.0, 0.5, -4.0]
    nodes = [
        helper.make_node(
            "LinearClassifier",
            ["float_input"],
            ["label", "probability_tensor"],
            domain="ai.onnx.ml",
            classlabels_ints=[0, 1, 2],
            coefficients=coefficients,
            intercepts=intercepts,
            multi_class=0,
            post_transform="LOGISTIC",
        ),
        helper.make_node(
            "Normalizer",
            ["probability_tensor"],
            ["probability_tensor_normalized"],
            domain="ai.onnx.ml",
            norm="L1",
        ),
        helper.make_node(
            "ZipMap",
            ["probability_tensor_normalized"],
            ["probabilities"],
            domain="ai.onnx.ml",
            classlabels_int64s=[0, 1, 2],
        ),
    ]
    prob_map = helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
    )
    graph = helper.make_graph(
        nodes,
        "logreg_iris",
        [helper.make_tensor_value_info("float_input", TensorProto.FLOAT, [None, 2])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
            helper.make_value_info("probabilities", helper.make_sequence_type_proto(prob_map)),
        ],
    )
    return _model(graph, ("", 9), ("ai.onnx.ml", 1))


BUILDERS = {
    "mul_1.onnx": build_mul_1,
    "sigmoid.onnx": build_sigmoid,
    "logreg_iris.onnx": build_logreg_iris,
}


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
