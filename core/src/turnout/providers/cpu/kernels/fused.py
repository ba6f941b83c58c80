"""Kernels for turnout's own fused ops (domain ai.turnout), which the graph optimizer emits:
FusedConv, FusedGemm, Gelu, LayerNormalization, SkipLayerNormalization and Attention.

Each computes exactly what its unfused decomposition computes (same dtypes, same reduction
precision as the standard kernels), only in fewer steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.conv import conv_runner
from turnout.providers.cpu.kernels.norm import _stash_dtype, layer_normalization
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.blas_threads import blas_matmul
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.activations import activation, activation_of, gelu_tanh
from turnout.sdk.semantics.activations import gelu as gelu_erf

__all__: list[str] = []

DOMAIN = "ai.turnout"
Array = np.ndarray[Any, Any]


def _act_of(node: KernelNode, owned: bool = False) -> Callable[[Array], Any]:
    return activation(*activation_of(node), owned=owned)


@cpu_kernel("FusedConv", since=1, domain=DOMAIN)
def fused_conv(node: KernelNode) -> KernelFn:
    """Conv followed by an activation (and optionally `Z` added before it, as residual)."""
    run_conv = conv_runner(node, int(node.attr("group", 1)))
    act = _act_of(node, owned=True)  # the conv's result (or y + z) is a fresh array

    def run(x: Array, w: Array, b: Array | None = None, z: Array | None = None) -> tuple[Array]:
        y = run_conv(x, w, b).astype(x.dtype, copy=False)
        if z is not None:
            y = y + z
        return (np.asarray(act(y)),)

    return run


@cpu_kernel("FusedGemm", since=1, domain=DOMAIN)
def fused_gemm(node: KernelNode) -> KernelFn:
    """alpha * A @ B + beta * C, then an activation. A may be N-D (transA=0): MatMul + Add."""
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    trans_a = bool(node.attr("transA", 0))
    trans_b = bool(node.attr("transB", 0))
    act = _act_of(node, owned=True)  # y below is always a fresh array of rank >= 2

    def run(a: Array, b: Array, c: Array | None = None) -> tuple[Array]:
        if b.ndim != 2 or a.ndim < 2 or (trans_a and a.ndim != 2):
            raise InvalidArgument(f"{node.name}: FusedGemm needs 2-D B and 2-D (or N-D) A")
        aa = a.T if trans_a else a
        bb = b.T if trans_b else b
        if aa.shape[-1] != bb.shape[0]:
            raise InvalidArgument(f"{node.name}: inner dimensions of {a.shape}, {b.shape} differ")
        y = blas_matmul(aa, bb)
        if alpha != 1.0:
            y = y * y.dtype.type(alpha)
        if c is not None and beta != 0.0:
            y = y + (c * c.dtype.type(beta) if beta != 1.0 else c)
        if y.dtype != a.dtype:
            y = y.astype(a.dtype)
        return (np.asarray(act(y)),)

    return run


@cpu_kernel("Gelu", since=1, domain=DOMAIN)
def gelu(node: KernelNode) -> KernelFn:
    """Gelu for models whose opset predates the standard Gelu (20)."""
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise InvalidArgument(f"{node.name}: approximate must be 'none' or 'tanh'")
    f = gelu_tanh if approximate == "tanh" else gelu_erf
    return lambda x: (np.asarray(f(x)),)


# LayerNormalization for models whose opset predates the standard one (17): same semantics
cpu_kernel("LayerNormalization", since=1, domain=DOMAIN)(layer_normalization)


@cpu_kernel("SkipLayerNormalization", since=1, domain=DOMAIN)
def skip_layer_normalization(node: KernelNode) -> KernelFn:
    """LayerNorm(input + skip (+ bias)) over the last axis; outputs as onnxruntime's contrib op:
    output, mean, inv_std_var, input_skip_bias_sum (trailing ones optional)."""
    eps = float(node.attr("epsilon", 1e-5))
    n_out = len(node.node.outputs)

    def run(
        x: Array, skip: Array, gamma: Array, beta: Array | None = None, bias: Array | None = None
    ) -> tuple[Any, ...]:
        if x.shape != skip.shape and np.broadcast_shapes(x.shape, skip.shape) != x.shape:
            raise InvalidArgument(f"{node.name}: skip {skip.shape} does not fit input {x.shape}")
        s = x + skip
        if bias is not None:
            s = s + bias
        ct = _stash_dtype(node, s)
        sf = s.astype(ct, copy=False)
        mean = sf.mean(axis=-1, keepdims=True)
        d = sf - mean
        var = (d * d).mean(axis=-1, keepdims=True)
        inv = 1 / np.sqrt(var + ct.type(eps))
        y = d * inv * gamma.astype(ct, copy=False)
        if beta is not None:
            y = y + beta.astype(ct, copy=False)
        outs = [y.astype(x.dtype), mean.astype(np.float32), inv.astype(np.float32), s]
        return tuple(outs[:n_out])

    return run


@cpu_kernel("Attention", since=1, domain=DOMAIN)
def attention(node: KernelNode) -> KernelFn:
    """softmax(Q K^T * scale + mask) V per head. Q [B,S,H*D], K and V [B,L,H*D] (already
    projected), mask additive and broadcastable to [B,H,S,L]; output [B,S,H*D]."""
    heads = int(node.attr("num_heads", 1))
    scale_attr = node.attr("scale", None)

    def split(t: Array, what: str) -> Array:
        if t.ndim != 3 or t.shape[-1] % heads:
            raise InvalidArgument(
                f"{node.name}: {what} must be [batch, seq, heads*head_dim] with {heads} heads, "
                f"got {t.shape}"
            )
        b, s, h = t.shape
        return t.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)

    def run(q: Array, k: Array, v: Array, mask: Array | None = None) -> tuple[Array]:
        qh, kh, vh = split(q, "query"), split(k, "key"), split(v, "value")
        scale = q.dtype.type(scale_attr if scale_attr is not None else 1 / np.sqrt(qh.shape[-1]))
        scores = np.matmul(qh, kh.transpose(0, 1, 3, 2)) * scale
        if mask is not None:
            try:
                scores = scores + mask
            except ValueError:
                raise InvalidArgument(
                    f"{node.name}: mask {mask.shape} does not broadcast to {scores.shape}"
                ) from None
        scores = scores - scores.max(axis=-1, keepdims=True)
        e = np.exp(scores)
        probs = e / e.sum(axis=-1, keepdims=True)
        out = np.matmul(probs.astype(v.dtype, copy=False), vh)
        b, _, s, d = out.shape
        return (out.transpose(0, 2, 1, 3).reshape(b, s, heads * d),)

    return run
