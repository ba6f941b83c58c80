"""numpy kernel of com.microsoft QLinearConv: ONNX's QLinearConv kernel, the input and output
moved between channels-last and channels-first when `channels_last` is set."""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.providers.cpu.kernels.conv import qlinear_conv
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []

Array = np.ndarray[Any, Any]


@cpu_kernel("QLinearConv", since=1, domain=DOMAIN)
def contrib_qlinear_conv(node: KernelNode) -> KernelFn:
    conv = qlinear_conv(node)
    if not node.attr("channels_last", 0):
        return conv

    def run(x: Array, *rest: Any) -> tuple[Array]:
        (y,) = conv(np.moveaxis(x, -1, 1), *rest)
        return (np.ascontiguousarray(np.moveaxis(y, 1, -1)),)

    return run
