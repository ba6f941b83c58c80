"""com.microsoft QLinearConv against onnxruntime's CPU kernel: channels first and last, groups,
strides, pads, dilations, bias, per-tensor and per-channel weight scales, uint8 and int8.
Outputs equal onnxruntime's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN

CASES = [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2]},
    {"kernel_shape": [1, 1]},
    {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 2, 2, 2], "group": 2},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "group": 4},
]


def _q(rng: np.random.Generator, shape: tuple[int, ...], dt: Any) -> np.ndarray:
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dt)


@pytest.mark.onnxruntime_exact_8bit
@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("channels_last", [1, 0])
@pytest.mark.parametrize("attrs", CASES, ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
@pytest.mark.parametrize("x_dt", [np.uint8, np.int8])
def test_qlinear_conv(
    contrib_parity: Any,
    rng: np.random.Generator,
    x_dt: Any,
    attrs: dict[str, Any],
    channels_last: int,
    with_bias: bool,
    per_channel: bool,
) -> None:
    c, m, size = 8, 8, 9
    group = attrs.get("group", 1)
    x = _q(rng, (2, size, size, c) if channels_last else (2, c, size, size), x_dt)
    w = _q(rng, (m, c // group, *attrs["kernel_shape"]), np.int8)
    per = (m,) if per_channel else ()
    inputs = [
        x,
        np.array(0.05, np.float32),
        np.array(rng.integers(-10, 10) + (128 if x_dt == np.uint8 else 0), x_dt),
        w,
        rng.uniform(0.002, 0.01, per).astype(np.float32),
        np.zeros(per, np.int8),
        np.array(0.2, np.float32),
        np.array(128 if x_dt == np.uint8 else 0, x_dt),
    ]
    if with_bias:
        inputs.append(rng.integers(-2000, 2000, m).astype(np.int32))
    names = [f"i{i}" for i in range(len(inputs))]
    node = helper.make_node(
        "QLinearConv", names, ["y"], domain=DOMAIN, channels_last=channels_last, **attrs
    )
    contrib_parity(node, inputs, constant={3, 4, 5, 8} & set(range(len(inputs))))
