"""`onnxruntime.datasets`: tiny example models shipped with the package, by file name.

turnout builds its own (the `build_*` functions here; `python -m turnout.api.datasets` rewrites the
files). A name that onnxruntime users know gives what onnxruntime's model of that name gives, or
is not here: onnxruntime's `logreg_iris.onnx` holds weights trained on the iris data, which
turnout does not ship, so `get_example("logreg_iris.onnx")` raises FileNotFoundError.
- `mul_1.onnx`: Y = X * W, X float [3, 2], W = [[1, 2], [3, 4], [5, 6]].
- `sigmoid.onnx`: y = Sigmoid(x), x float [3, 4, 5].
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from turnout._submodules import submodule

__all__ = ["DATASETS_DIR", "build_mul_1", "build_sigmoid", "get_example"]

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


BUILDERS = {
    "mul_1.onnx": build_mul_1,
    "sigmoid.onnx": build_sigmoid,
}


def __getattr__(name: str) -> ModuleType:
    """A submodule, imported on first read (see `turnout._submodules`)."""
    return submodule(__name__, name)
