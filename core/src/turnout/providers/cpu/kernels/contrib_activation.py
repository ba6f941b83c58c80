"""numpy kernels of the element-wise com.microsoft ops (Gelu, BiasGelu, FastGelu, QuickGelu,
BiasAdd). They compute in the input's dtype, as onnxruntime's float kernels do."""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.activations import activation
from turnout.sdk.semantics.numerics import sigmoid

__all__: list[str] = []

Array = np.ndarray[Any, Any]

_gelu = activation("Gelu", 0.0, 0.0)
_gelu_tanh = activation("GeluTanh", 0.0, 0.0)


def _biased(node: KernelNode, x: Array, bias: Array | None) -> Array:
    """x + bias, where bias runs along x's last axis (onnxruntime's one layout)."""
    if bias is None:
        return x
    if bias.ndim != 1 or x.ndim < 1 or bias.shape[0] != x.shape[-1]:
        raise InvalidArgument(
            f"{node.name}: bias {bias.shape} must be 1-D with the size of the last axis of "
            f"the input {x.shape}"
        )
    return x + bias


@cpu_kernel("Gelu", since=1, domain=DOMAIN)
def gelu(node: KernelNode) -> KernelFn:
    """x * Phi(x), with the exact (erf) normal CDF."""
    return lambda x: (np.asarray(_gelu(x)),)


@cpu_kernel("BiasGelu", since=1, domain=DOMAIN)
def bias_gelu(node: KernelNode) -> KernelFn:
    """Gelu(A + B), B along the last axis."""
    return lambda a, b: (np.asarray(_gelu(_biased(node, a, b))),)


@cpu_kernel("FastGelu", since=1, domain=DOMAIN)
def fast_gelu(node: KernelNode) -> KernelFn:
    """Gelu's tanh approximation of X (+ bias)."""
    return lambda x, bias=None: (np.asarray(_gelu_tanh(_biased(node, x, bias))),)


@cpu_kernel("QuickGelu", since=1, domain=DOMAIN)
def quick_gelu(node: KernelNode) -> KernelFn:
    """x * sigmoid(alpha * x) (onnxruntime's MLAS sigmoid in float32, as its kernel)."""
    alpha = float(node.attr("alpha", 1.702))

    def run(x: Array) -> tuple[Array]:
        return (np.asarray(x * sigmoid(x * x.dtype.type(alpha))),)

    return run


@cpu_kernel("BiasAdd", since=1, domain=DOMAIN)
def bias_add(node: KernelNode) -> KernelFn:
    """X + bias + skip: X and skip [N, S, C], bias [C]."""

    def run(x: Array, bias: Array, skip: Array) -> tuple[Array]:
        if x.ndim != 3 or skip.shape != x.shape:
            raise InvalidArgument(
                f"{node.name}: X {x.shape} must be 3-D and skip {skip.shape} of the same shape"
            )
        return (np.asarray(_biased(node, x, bias) + skip),)

    return run
