"""What a DeformConv node (ai.onnx 19/22) means: its geometry and input checks.

A 2-D convolution whose kernel taps sample the input at their regular position plus a
learned (dy, dx) offset per output pixel, tap and offset group (bilinear, zero outside the
image), each sample scaled by the optional mask. Strides, dilations, pads and the output size
follow Conv (`turnout.sdk.semantics.geometry`); the offset's spatial size must equal that output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics.geometry import (
    check_conv_channels,
    conv_geometry,
    conv_kernel_shape,
    spatial_attrs,
)

__all__ = ["DeformConvPlan", "deform_conv_plan"]


@dataclass(frozen=True)
class DeformConvPlan:
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    pads_begin: list[int]
    out: list[int]
    group: int
    offset_group: int


def deform_conv_plan(
    node: KernelNode,
    x: Any,
    w: Any,
    offset: Any,
    bias: Any | None = None,
    mask: Any | None = None,
) -> DeformConvPlan:
    """Check the shapes (tuples of ints; None for absent inputs) of a 2-D DeformConv run."""
    name = node.name
    x, w, offset = tuple(x), tuple(w), tuple(offset)
    kernel = conv_kernel_shape(node, x, w)
    if len(x) != 4:
        raise InvalidArgument(f"{name}: DeformConv takes 2-D images (N, C, H, W), got {x}")
    group, og = int(node.attr("group", 1)), int(node.attr("offset_group", 1))
    check_conv_channels(name, x, w, group)
    strides, dilations = spatial_attrs(node, 2, kernel)
    pb, _, out = conv_geometry(node, x[2:], kernel, strides, dilations)
    taps = int(np.prod(kernel))
    if og < 1 or x[1] % og:
        raise InvalidArgument(f"{name}: offset_group {og} must divide the {x[1]} channels")
    if offset != (x[0], og * taps * 2, *out):
        raise InvalidArgument(
            f"{name}: offset {offset} must be {(x[0], og * taps * 2, *out)} for offset_group "
            f"{og}, kernel {kernel} and output {out}"
        )
    if mask is not None and tuple(mask) != (x[0], og * taps, *out):
        raise InvalidArgument(f"{name}: mask {tuple(mask)} must be {(x[0], og * taps, *out)}")
    if bias is not None and tuple(bias) != (w[0],):
        raise InvalidArgument(f"{name}: B {tuple(bias)} must be ({w[0]},)")
    return DeformConvPlan(kernel, strides, dilations, pb, out, group, og)
