"""turnout's own conformance cases (kind "turnout"): what onnx's node tests leave open.

Each case's expected outputs are the CPU provider's (its numpy kernels), compared bit for bit
(`Case.exact`): a provider that reads a default or orders a formula differently shows here
even where onnx's tolerance would let it pass.

- `turnout_selu_default_alpha_gamma`: Selu without attributes, so that alpha and gamma are
  the schema's float32 defaults (before, two providers used the float64 1.6732632423543772).
  The inputs cover negative, zero (both signs), positive and large magnitudes and infinities.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h

from .cases import Case

__all__ = ["SELU_INPUT", "own_cases"]

SELU_INPUT = np.array(
    [-np.inf, -3.4e38, -1e30, -1e4, -104.0, -88.7, -20.0, -3.0, -1.0, -0.5, -0.1, -1e-3,
     -1e-7, -1e-38, -1e-45, -0.0, 0.0, 1e-45, 1e-38, 1e-7, 1e-3, 0.1, 0.5, 1.0, 3.0, 20.0,
     88.7, 104.0, 1e4, 1e30, 3.4e38, np.inf],
    dtype=np.float32,
)  # fmt: skip
"""Selu's input: every region of the formula, the float32 edges and the infinities."""


def _selu_model() -> onnx.ModelProto:
    node = h.make_node("Selu", ["x"], ["y"], name="selu_defaults")  # no alpha, no gamma
    shape = list(SELU_INPUT.shape)
    graph = h.make_graph(
        [node],
        "turnout_selu_default_alpha_gamma",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 22)])


def _cpu_outputs(model: onnx.ModelProto, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from turnout.tools.testing import cpu_session

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        sess = cpu_session(model)
        feeds = {i.name: v for i, v in zip(model.graph.input, inputs)}
        return [np.asarray(v) for v in sess.run(None, feeds)]


def own_cases() -> list[Case]:
    """turnout's own cases, their expected outputs computed by the CPU provider."""
    model = _selu_model()
    inputs = [SELU_INPUT]
    expected = _cpu_outputs(model, inputs)
    return [
        Case(
            "turnout_selu_default_alpha_gamma",
            "turnout",
            "Selu",
            0.0,
            0.0,
            model=model,
            data_sets=((inputs, expected),),
            exact=True,
        )
    ]
