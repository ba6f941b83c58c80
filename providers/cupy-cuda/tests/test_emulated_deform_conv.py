"""DeformConv on the emulated backend against onnx.reference beyond the node cases: strides,
dilations, asymmetric pads, two convolution groups and two offset groups, a mask and a bias,
and offsets large enough to sample outside the image (zero there)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 0, 2]},
        {"group": 2, "offset_group": 2, "pads": [1, 1, 1, 1]},
    ],
)
@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv(node_check: Any, attrs: dict[str, Any], with_mask: bool) -> None:
    rng = np.random.default_rng(14)
    n, c, h, w, oc, k = 2, 4, 5, 6, 4, (2, 3)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((oc, c // attrs.get("group", 1), *k)).astype(np.float32)
    node = helper.make_node("DeformConv", ["x", "w", "off", "b", "m"], ["y"], **attrs)
    # the output size from a plain Conv's shape inference
    pads = attrs.get("pads", [0] * 4)
    st, dl = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    out = [
        (size + pads[i] + pads[i + 2] - ((k[i] - 1) * dl[i] + 1)) // st[i] + 1
        for i, size in enumerate((h, w))
    ]
    og = attrs.get("offset_group", 1)
    feeds = {
        "x": x,
        "w": weight,
        "off": (1.5 * rng.standard_normal((n, og * 6 * 2, *out))).astype(np.float32),
        "b": rng.standard_normal(oc).astype(np.float32),
    }
    if with_mask:
        feeds["m"] = rng.uniform(0, 1, (n, og * 6, *out)).astype(np.float32)
    else:
        node.input[4] = ""
    node_check.against_reference(node, feeds, 22, 1e-4)
