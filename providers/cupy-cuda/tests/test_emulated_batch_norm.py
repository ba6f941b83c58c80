"""BatchNormalization in training mode on the emulated backend against turnout's numpy CPU
kernel: the running statistics (opset 15) and, in opsets 9-13, the saved batch statistics
too, in float32 and float16 (statistics in float32)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.tools.testing import one_node_model


@pytest.mark.parametrize(("opset", "n_out"), [(15, 3), (9, 5), (12, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_training_statistics(node_check: Any, opset: int, n_out: int, dtype: Any) -> None:
    rng = np.random.default_rng(4)
    feeds = {
        "x": rng.standard_normal((3, 4, 5, 2)).astype(dtype),
        "s": rng.standard_normal(4).astype(dtype),
        "b": rng.standard_normal(4).astype(dtype),
        "m": rng.standard_normal(4).astype(dtype),
        "v": rng.uniform(0.5, 2, 4).astype(dtype),
    }
    outs = ["y", "rm", "rv", "sm", "sv"][:n_out]
    attrs: dict[str, Any] = {"momentum": 0.7, "epsilon": 1e-3}
    if opset >= 14:
        attrs["training_mode"] = 1
    node = helper.make_node("BatchNormalization", list(feeds), outs, **attrs)
    model = one_node_model(node, list(feeds.values()), opset)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    for o in model.graph.output:  # opset 9-13 shape inference leaves the statistics untyped
        if not o.type.tensor_type.elem_type:
            o.CopyFrom(helper.make_tensor_value_info(o.name, elem, None))
    tol = 2e-3 if dtype == np.float16 else 1e-5
    node_check.against_cpu(model, feeds, tol)
