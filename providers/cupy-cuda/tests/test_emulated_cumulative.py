"""CumSum and CumProd on the emulated backend against turnout's numpy CPU kernels: exclusive
and reverse along each axis, with zeros in CumProd's input (an exclusive product must not
divide by them) and integer data."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.testing import assert_outputs_close, cpu_session, one_node_model, provider_session


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_cumulative(emulated: str, op: str, axis: int, exclusive: int, reverse: int, dtype: Any):
    rng = np.random.default_rng(8)
    x = rng.integers(-2, 3, (3, 4, 5)).astype(dtype)  # zeros included
    feeds = {"x": x, "axis": np.array(axis, np.int64)}
    node = helper.make_node(op, ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    model = one_node_model(node, list(feeds.values()), 26)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = provider_session(model, emulated).run(None, feeds)
        want = cpu_session(model).run(None, feeds)
    assert_outputs_close(want, got, 1e-6, 1e-6)
