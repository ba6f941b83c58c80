"""CumSum and CumProd on the emulated backend against turnout's numpy CPU kernels: exclusive
and reverse along each axis, with zeros in CumProd's input (an exclusive product must not
divide by them) and integer data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.tools.testing import one_node_model


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_cumulative(
    node_check: Any, op: str, axis: int, exclusive: int, reverse: int, dtype: Any
) -> None:
    rng = np.random.default_rng(8)
    x = rng.integers(-2, 3, (3, 4, 5)).astype(dtype)  # zeros included
    feeds = {"x": x, "axis": np.array(axis, np.int64)}
    node = helper.make_node(op, ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    model = one_node_model(node, list(feeds.values()), 26)
    node_check.against_cpu(model, feeds, 1e-6)
