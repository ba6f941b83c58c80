"""numpy kernel of QAttention (com.microsoft): the 8-bit input and weight dequantized
((q - zero point) * scale, the weight's parameters per tensor or per column), then the
Attention kernel (projection, mask index, past/present, unidirectional) on them.

onnxruntime multiplies the integers and scales the int32 sums; the float product of the
dequantized values differs from that by float32 rounding only."""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.providers.cpu.kernels.contrib_attention import attention
from turnout.providers.cpu.kernels.quant import dequantize
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []

Array = np.ndarray[Any, Any]


@cpu_kernel("QAttention", since=1, domain=DOMAIN)
def qattention(node: KernelNode) -> KernelFn:
    attend = attention(node)

    def run(
        x: Array,
        w: Array,
        bias: Array,
        x_scale: Array,
        w_scale: Array,
        mask: Array | None = None,
        x_zp: Array | None = None,
        w_zp: Array | None = None,
        past: Array | None = None,
    ) -> tuple[Any, ...]:
        xf = dequantize(x, x_scale, x_zp)
        wf = dequantize(w, w_scale, w_zp)
        outs = attend(xf, wf, bias.astype(np.float32), mask, past)
        return tuple(None if o is None else o.astype(bias.dtype, copy=False) for o in outs)

    return run
