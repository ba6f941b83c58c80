"""numpy kernel of QEmbedLayerNormalization (com.microsoft): the tables, gamma and beta
dequantized ((q - zero point) * scale), then the EmbedLayerNormalization kernel. The
dequantized tensors of constant inputs are kept for the next run."""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.providers.cpu.kernels.contrib_normalization import embed_layer_normalization
from turnout.providers.cpu.kernels.quant import dequantize
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.constants import constant_input

__all__: list[str] = []

Array = np.ndarray[Any, Any]

_QUANTIZED = (2, 3, 4, 5, 6)
"""Indices of the quantized inputs; each one's scale is 6 after it, its zero point 11."""


@cpu_kernel("QEmbedLayerNormalization", since=1, domain=DOMAIN)
def qembed_layer_normalization(node: KernelNode) -> KernelFn:
    embed = embed_layer_normalization(node)
    constant = all(
        constant_input(node, i + k) for i in _QUANTIZED for k in (0, 6, 11) if node.inputs[i]
    )
    kept: list[Any] = [None, None]

    def tables(args: tuple[Any, ...]) -> list[Array | None]:
        key = tuple(id(args[i + k]) for i in _QUANTIZED for k in (0, 6, 11))
        if kept[0] == key:
            found: list[Array | None] = kept[1]
            return found
        out = [
            None if args[i] is None else dequantize(args[i], args[i + 6], args[i + 11])
            for i in _QUANTIZED
        ]
        if constant:
            kept[:] = [key, out]
        return out

    def run(*args: Any) -> tuple[Any, ...]:
        args = args + (None,) * (18 - len(args))
        word, pos, seg, gamma, beta = tables(args)
        return tuple(embed(args[0], args[1], word, pos, seg, gamma, beta, args[7]))

    return run
