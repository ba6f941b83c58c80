"""Activations run without their attributes use onnx's schema defaults, as onnx.reference does.

Before: the numba code generator's Selu used the float64 constants 1.6732632423543772 and
1.0507009873554805, not the schema's float32 values the CPU provider and onnx.reference use,
so a float64 Selu differed from both in the eighth digit.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

from turnout.tools.testing import cpu_session, one_node_model, provider_session, run_reference

X = np.linspace(-3, 3, 13)


@pytest.mark.parametrize("op", ["Selu", "HardSigmoid", "LeakyRelu", "Elu", "ThresholdedRelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_default_attributes_are_the_schema_defaults(op: str, dtype: type) -> None:
    node = h.make_node(op, ["x"], ["y"])
    x = X.astype(dtype)
    model = one_node_model(node, [x])
    (expected,) = run_reference(node, [x])
    for sess in (cpu_session(model), provider_session(model, "NumbaExecutionProvider")):
        (got,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(got, expected, rtol=1e-6 if dtype is np.float32 else 1e-14)
