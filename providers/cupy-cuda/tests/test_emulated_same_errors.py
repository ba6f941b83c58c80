"""A node the CPU provider refuses is refused by the CuPy kernels (on the emulated backend) with
the same `InvalidArgument`, because both compute it with `turnout.sdk.semantics`.

Before: CuPy's Split wrapped the axis with `axis % ndim` and split unevenly where the CPU
provider (and onnx's schema) refuse; negative sizes ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper as h

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import cpu_session, kernel_error, provider_session

X5 = np.arange(5, dtype=np.float32)
SPLIT_CASES = [
    pytest.param(["x", "s"], 2, {}, [X5, np.array([-1, 6])], 13, id="negative-size"),
    pytest.param(["x"], 2, {"num_outputs": 3}, [X5], 18, id="num_outputs-mismatch"),
    pytest.param(["x"], 2, {}, [X5], 13, id="uneven"),
    pytest.param(["x"], 2, {"split": [2, 2]}, [X5], 11, id="sizes-do-not-sum"),
    pytest.param(["x"], 5, {"axis": 1}, [X5], 13, id="axis-out-of-range"),
    pytest.param(["x"], 5, {"axis": -2}, [X5], 13, id="negative-axis-out-of-range"),
]


@pytest.mark.parametrize(("ins", "n_out", "attrs", "inputs", "opset"), SPLIT_CASES)
def test_split_raises_as_the_cpu_provider(
    ins: list[str],
    n_out: int,
    attrs: dict[str, Any],
    inputs: list[np.ndarray],
    opset: int,
    emulated: str,
) -> None:
    outs = [f"y{i}" for i in range(n_out)]
    node = h.make_node("Split", ins, outs, name="split0", **attrs)
    cpu = kernel_error(cpu_session, node, inputs, opset)
    gpu = kernel_error(lambda m: provider_session(m, emulated), node, inputs, opset)
    assert isinstance(cpu, InvalidArgument), repr(cpu)
    assert type(gpu) is type(cpu) and str(gpu) == str(cpu)
