"""numpy kernels of the contrib layer normalizations: SkipLayerNormalization,
SkipSimplifiedLayerNormalization, EmbedLayerNormalization (com.microsoft),
SimplifiedLayerNormalization (the RMS norm onnxruntime registers in the ONNX domain) and
LayerNormalization before opset 17 (onnxruntime's ONNX-domain contrib op; the standard kernel).

As onnxruntime's CPU kernels do, they sum and normalize in float32 (float64 for double inputs)
and round once to the input's type; mean and inv_std_var are float32, one per normalized row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.norm import layer_normalization
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.shape import norm_axis

__all__: list[str] = []

Array = np.ndarray[Any, Any]


def _compute_dtype(x: Array) -> np.dtype[Any]:
    return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)


def _normalized(s: Array, eps: float, simplified: bool) -> tuple[Array, Array, Array]:
    """(s - mean) * inv_std_var over the last axis, or s * inv_rms when `simplified` (mean
    then zeros); with mean and inv, dims kept. `s` is already in the compute dtype."""
    t = s.dtype.type
    if simplified:
        mean = np.zeros((*s.shape[:-1], 1), s.dtype)
        centred = s
    else:
        mean = s.mean(axis=-1, keepdims=True)
        centred = s - mean
    inv = t(1) / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + t(eps))
    return centred * inv, mean, inv


def _vector(node: KernelNode, what: str, v: Array | None, size: int) -> None:
    if v is not None and v.shape != (size,):
        raise InvalidArgument(f"{node.name}: {what} must have shape ({size},), got {v.shape}")


def _skip_norm(node: KernelNode, simplified: bool) -> Any:
    eps = float(node.attr("epsilon", 1e-12))
    n_out = len(node.node.outputs)

    def run(
        x: Array, skip: Array, gamma: Array, beta: Array | None, bias: Array | None
    ) -> tuple[Any, ...]:
        if x.ndim not in (2, 3):
            raise InvalidArgument(f"{node.name}: input must be 2-D or 3-D, got {x.shape}")
        hidden = x.shape[-1]
        for what, v in (("gamma", gamma), ("beta", beta), ("bias", bias)):
            _vector(node, what, v, hidden)
        if skip.ndim > x.ndim or np.broadcast_shapes(x.shape, skip.shape) != x.shape:
            raise InvalidArgument(f"{node.name}: skip {skip.shape} does not fit input {x.shape}")
        ct = _compute_dtype(x)
        s = x.astype(ct) + skip.astype(ct)
        if bias is not None:
            s += bias.astype(ct)
        y, mean, inv = _normalized(s, eps, simplified)
        y = y * gamma.astype(ct)
        if beta is not None:
            y += beta.astype(ct)
        f32 = np.float32
        outs = (y.astype(x.dtype), mean.astype(f32), inv.astype(f32), s.astype(x.dtype))
        return outs[:n_out]

    return run


@cpu_kernel("SkipLayerNormalization", since=1, domain=DOMAIN)
def skip_layer_normalization(node: KernelNode) -> KernelFn:
    """LayerNorm(input + skip (+ bias)) * gamma (+ beta) over the last axis."""
    run = _skip_norm(node, simplified=False)

    def kernel(
        x: Array, skip: Array, gamma: Array, beta: Array | None = None, bias: Array | None = None
    ) -> tuple[Any, ...]:
        return run(x, skip, gamma, beta, bias)

    return kernel


@cpu_kernel("SkipSimplifiedLayerNormalization", since=1, domain=DOMAIN)
def skip_simplified_layer_normalization(node: KernelNode) -> KernelFn:
    """RMSNorm(input + skip (+ bias)) * gamma; its `mean` output is zeros (no mean is taken)."""
    run = _skip_norm(node, simplified=True)

    def kernel(x: Array, skip: Array, gamma: Array, bias: Array | None = None) -> tuple[Any, ...]:
        return run(x, skip, gamma, None, bias)

    return kernel


# onnxruntime's LayerNormalization from version 1: ONNX's opset-17 semantics, so its kernel
cpu_kernel("LayerNormalization", since=1)(layer_normalization)


@cpu_kernel("SimplifiedLayerNormalization", since=1)
def simplified_layer_normalization(node: KernelNode) -> KernelFn:
    """X / sqrt(mean(X^2 over the axes from `axis`) + epsilon) * scale (RMSNorm)."""
    eps = float(node.attr("epsilon", 1e-5))
    axis_attr = int(node.attr("axis", -1))
    n_out = len(node.node.outputs)

    def run(x: Array, scale: Array) -> tuple[Any, ...]:
        axis = norm_axis(node, axis_attr, x.ndim)
        if np.broadcast_shapes(x.shape[axis:], scale.shape) != x.shape[axis:]:
            raise InvalidArgument(
                f"{node.name}: scale {scale.shape} does not fit the normalized shape "
                f"{x.shape[axis:]}"
            )
        ct = _compute_dtype(x)
        xf = x.astype(ct)
        axes = tuple(range(axis, x.ndim))
        inv = ct.type(1) / np.sqrt((xf * xf).mean(axis=axes, keepdims=True) + ct.type(eps))
        y = (xf * inv).astype(scale.dtype) * scale
        return (y, inv.astype(np.float32))[:n_out]

    return run


@cpu_kernel("EmbedLayerNormalization", since=1, domain=DOMAIN)
def embed_layer_normalization(node: KernelNode) -> KernelFn:
    """LayerNorm(word[ids] + position[pos] (+ segment[seg])) * gamma + beta; mask_index is the
    count of ones in each row of `mask` (zeros without one); embedding_sum the sum normed."""
    eps = float(node.attr("epsilon", 1e-12))
    n_out = len(node.node.outputs)

    def lookup(table: Array, ids: Array, what: str) -> Array:
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            raise InvalidArgument(
                f"{node.name}: {what} must lie in [0, {table.shape[0]}), got values in "
                f"[{ids.min()}, {ids.max()}]"
            )
        return table[ids]

    def run(
        ids: Array,
        seg: Array | None,
        word: Array,
        pos_table: Array,
        seg_table: Array | None,
        gamma: Array,
        beta: Array,
        mask: Array | None = None,
        pos_ids: Array | None = None,
    ) -> tuple[Any, ...]:
        if ids.ndim != 2:
            raise InvalidArgument(f"{node.name}: input_ids must be 2-D, got {ids.shape}")
        batch, seq = ids.shape
        if pos_ids is None:
            positions = np.broadcast_to(np.arange(seq), ids.shape)
        else:
            try:
                positions = np.broadcast_to(pos_ids, ids.shape)
            except ValueError:
                raise InvalidArgument(
                    f"{node.name}: position_ids {pos_ids.shape} do not fit input_ids {ids.shape}"
                ) from None
        ct = _compute_dtype(word)
        emb = lookup(word, ids, "input_ids").astype(ct)
        emb += lookup(pos_table, positions, "position ids").astype(ct)
        if seg is not None and seg_table is not None:
            emb += lookup(seg_table, seg, "segment_ids").astype(ct)
        y, _, _ = _normalized(emb, eps, simplified=False)
        y = y * gamma.astype(ct) + beta.astype(ct)
        if mask is None:
            mask_index = np.zeros(batch, np.int32)
        else:
            mask_index = mask.sum(axis=-1, dtype=np.int32).reshape(batch)
        return (y.astype(word.dtype), mask_index, emb.astype(word.dtype))[:n_out]

    return run
