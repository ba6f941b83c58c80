"""The training optimizers on the emulated backend against onnx.reference beyond the node
cases: Adam before and after its first update (bias correction only for T > 0) with a
post-update decay, Adagrad's decayed rate, Nesterov momentum over two tensors, float64; and
the input-grouping check."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.sdk.semantics.optimizers import optimizer_groups

DOMAIN = "ai.onnx.preview.training"
CASES: list[tuple[str, int, dict[str, Any]]] = [
    (
        "Adam",
        2,
        {"alpha": 0.8, "beta": 0.95, "norm_coefficient": 0.01, "norm_coefficient_post": 0.1},
    ),
    ("Adagrad", 1, {"decay_factor": 0.3, "epsilon": 1e-4, "norm_coefficient": 0.02}),
    ("Momentum", 1, {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.01}),
    ("Momentum", 1, {"alpha": 0.7, "beta": 0.2, "mode": "standard", "norm_coefficient": 0.0}),
]


@pytest.mark.parametrize("t", [0, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("op", "states", "attrs"), CASES)
def test_optimizer(node_check: Any, op: str, states: int, attrs: dict[str, Any], t: int, dtype):
    rng = np.random.default_rng(12)
    # onnx.reference casts Adam's results to float32 when it updates several tensors
    shapes = [(3,), (2, 2)] if dtype == np.float32 else [(2, 3)]
    feeds: dict[str, Any] = {"r": np.array(0.1, dtype), "t": np.array(t, np.int64)}
    for role in ["x", "g"] + [f"s{k}" for k in range(states)]:
        for i, shape in enumerate(shapes):
            v = rng.standard_normal(shape)
            feeds[f"{role}{i}"] = (
                np.abs(v) if role == "s1" or (op == "Adagrad" and role == "s0") else v
            ).astype(dtype)
    outs = [
        f"{role}{i}_new"
        for role in ["x"] + [f"s{k}" for k in range(states)]
        for i in range(len(shapes))
    ]
    node = helper.make_node(op, list(feeds), outs, domain=DOMAIN, **attrs)
    opsets = {"": 17, DOMAIN: 1}
    node_check.against_reference(node, feeds, opsets, 1e-5)


def test_grouping_must_divide() -> None:
    with pytest.raises(InvalidArgument, match="opt: Adam takes R, T and 4 tensors"):
        optimizer_groups("opt", "Adam", [0, 0, 1, 2, 3])
