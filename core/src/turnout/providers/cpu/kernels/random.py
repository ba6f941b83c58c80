"""Randomness: Dropout (identity at inference, seeded masks in training mode) and Multinomial
(which onnx.reference lacks).

Other random ops (RandomNormal, Bernoulli, ...) run on onnx.reference: their outputs cannot be
checked against fixed data, so an own kernel would add nothing but code. Every unseeded random
op draws from a generator that `turnout.set_seed` seeds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.seed import random_state
from turnout.sdk.semantics.dropout import DropoutMode

__all__: list[str] = []


@cpu_kernel("Dropout", since=1)
def dropout(node: KernelNode) -> KernelFn:
    mode = DropoutMode(node)
    n_out = len(node.node.outputs)

    def run(x: np.ndarray, ratio: Any = None, training: Any = None) -> tuple[Any, ...]:
        return mode.apply(np, x, ratio, training)[:n_out]

    return run


@cpu_kernel("Multinomial", since=7)
def multinomial(node: KernelNode) -> KernelFn:
    """`sample_size` class indices per row of unnormalized log-probabilities [batch, classes];
    onnx.reference has no Multinomial, onnxruntime does."""
    seed = node.attr("seed")
    samples = int(node.attr("sample_size", 1))
    out_dtype = np.dtype(np.int64) if node.attr("dtype", 6) == 7 else np.dtype(np.int32)
    session_rng = random_state()

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim != 2:
            raise InvalidArgument(f"{node.name}: Multinomial input must be [batch, classes]")
        rng = np.random.RandomState(int(seed)) if seed is not None else session_rng
        logits = x.astype(np.float64)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
        u = rng.uniform(0, 1, (x.shape[0], samples))
        picks = np.minimum((u[:, :, None] > cdf[:, None, :]).sum(axis=2), x.shape[1] - 1)
        return (picks.astype(out_dtype),)

    return run
