"""MaxPool's Indices output and integer inputs on the emulated backend, against turnout's
numpy CPU kernel: pads, dilations, ceil_mode, both storage orders, 1-D to 3-D, ties (the first
tap inside the input is indexed, never a pad) and int8/uint8 data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.tools.testing import one_node_model

CASES: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    ((2, 3, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 6, 7), {"kernel_shape": [2, 3], "dilations": [2, 1], "ceil_mode": 1}),
    ((1, 2, 5, 5), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "storage_order": 1}),
    ((1, 1, 4, 5, 3), {"kernel_shape": [2, 2, 2], "strides": [1, 2, 1], "storage_order": 1}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8])
@pytest.mark.parametrize(("shape", "attrs"), CASES)
def test_indices_match_cpu(
    node_check: Any, shape: tuple[int, ...], attrs: dict[str, Any], dtype: Any
) -> None:
    rng = np.random.default_rng(6)
    x = rng.integers(-3, 4, shape) if dtype != np.uint8 else rng.integers(0, 4, shape)
    x = x.astype(dtype)  # few distinct values: many ties
    if dtype == np.float32:
        x[..., :2] = -np.inf  # a window whose max is -inf must not index the padding
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    model = one_node_model(node, [x], 12)
    node_check.against_cpu(model, {"x": x}, 0)
