"""numpy kernels of com.microsoft QuantizeLinear and DequantizeLinear: the ONNX kernels as of
version 13 (per tensor or per `axis`, rounding half to even, saturating), which also take the
16-bit and 4-bit types. A float16 input is quantized in float32, as onnxruntime's contrib
kernel does (ONNX's divides in the scale's type)."""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.providers.cpu.kernels.quant import dequantize_linear, quantize_linear
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []

_AS_ONNX = 13
"""The ONNX version whose semantics these ops have (per-axis parameters, no blocks)."""


def _as_onnx(node: KernelNode) -> KernelNode:
    return KernelNode(node.node, node.opset, _AS_ONNX)


@cpu_kernel("QuantizeLinear", since=1, domain=DOMAIN)
def contrib_quantize_linear(node: KernelNode) -> KernelFn:
    run = quantize_linear(_as_onnx(node))

    def run_float32(x: Any, scale: Any, zero_point: Any = None) -> Any:
        return run(np.asarray(x, np.float32), np.asarray(scale, np.float32), zero_point)

    return run_float32


@cpu_kernel("DequantizeLinear", since=1, domain=DOMAIN)
def contrib_dequantize_linear(node: KernelNode) -> KernelFn:
    return dequantize_linear(_as_onnx(node))
