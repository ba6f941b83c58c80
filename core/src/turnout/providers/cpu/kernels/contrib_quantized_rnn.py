"""DynamicQuantizeLSTM (com.microsoft) on the CPU provider: the numpy kernel of
`turnout.sdk.semantics.quantized_lstm` (onnxruntime's order, bit-equal on x86-64 with FMA3)
with numpy's exact float products of the 8-bit codes."""

from __future__ import annotations

from turnout.graph.contrib import DOMAIN
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.quantized_lstm import CodeProducts, build_dynamic_quantize_lstm

__all__: list[str] = []


@cpu_kernel("DynamicQuantizeLSTM", since=1, domain=DOMAIN)
def dynamic_quantize_lstm(node: KernelNode) -> KernelFn:
    return build_dynamic_quantize_lstm(node, CodeProducts())
