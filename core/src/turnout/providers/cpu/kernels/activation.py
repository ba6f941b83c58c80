"""Activation kernels (Relu, Sigmoid, Gelu, ...): element-wise, dtype-preserving.

Each factory turns the op's attributes into a function of `x`; constants are converted to the
input's scalar type inside the kernel so float16/bfloat16/float32 inputs never promote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.activations import gelu_tanh, selu_scales
from turnout.sdk.semantics.numerics import expm1, gelu_erf, typed_constants
from turnout.sdk.semantics.numerics import sigmoid as _sigmoid

__all__: list[str] = []

Array = np.ndarray[Any, Any]


def _act(op: str, since: int) -> Callable[[Callable[[KernelNode], Callable[[Array], Array]]], Any]:
    """Register `make(node) -> f(x)` as a kernel returning `(f(x),)`."""

    def deco(make: Callable[[KernelNode], Callable[[Array], Array]]) -> Any:
        def factory(node: KernelNode) -> KernelFn:
            f = make(node)
            return lambda x: (np.asarray(f(x)),)

        factory.__name__ = factory.__qualname__ = make.__name__
        cpu_kernel(op, since=since)(factory)
        return make

    return deco


_ZERO_ONE = typed_constants(0, 1)


def _softplus(x: Array) -> Any:
    """log(1 + exp(x)) without overflow."""
    return np.maximum(x, x.dtype.type(0)) + np.log1p(np.exp(-np.abs(x)))


@cpu_kernel("Relu", since=1)
def relu(node: KernelNode) -> KernelFn:
    maximum = np.maximum

    def run(x: Array) -> tuple[Array]:
        y = maximum(x, _ZERO_ONE(x.dtype)[0])
        return (y if type(y) is np.ndarray else np.asarray(y),)

    return run


@_act("LeakyRelu", 1)
def leaky_relu(node: KernelNode) -> Callable[[Array], Array]:
    consts = typed_constants(0, node.attr("alpha"))

    def f(x: Array) -> Any:
        zero, alpha = consts(x.dtype)
        return np.where(x < zero, x * alpha, x)

    return f


@_act("Elu", 1)
def elu(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha")
    return lambda x: np.where(x < x.dtype.type(0), x.dtype.type(alpha) * np.expm1(x), x)


@_act("Selu", 1)
def selu(node: KernelNode) -> Callable[[Array], Array]:
    gamma, gamma_alpha = selu_scales(node.attr("alpha"), node.attr("gamma"))

    def f(x: Array) -> Any:
        t = x.dtype.type
        return np.where(x > t(0), t(gamma) * x, t(gamma_alpha) * expm1(x))

    return f


@_act("Celu", 12)
def celu(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha")

    def f(x: Array) -> Any:
        a = x.dtype.type(alpha)
        return np.where(x > x.dtype.type(0), x, a * np.expm1(x / a))

    return f


@_act("Sigmoid", 1)
def sigmoid(node: KernelNode) -> Callable[[Array], Array]:
    """onnxruntime's MLAS sigmoid in float32, exact in the other dtypes (`numerics.sigmoid`)."""
    return _sigmoid


@_act("HardSigmoid", 1)
def hard_sigmoid(node: KernelNode) -> Callable[[Array], Array]:
    consts = typed_constants(node.attr("alpha"), node.attr("beta"))

    def f(x: Array) -> Any:
        alpha, beta = consts(x.dtype)
        if beta == 0 or x.ndim == 0:  # v may be -0, which clip and maximum sign apart
            t = x.dtype.type
            return np.clip(x * alpha + beta, t(0), t(1))
        v = np.multiply(x, alpha)
        np.add(v, beta, out=v)
        return _unit_clip(v)

    return f


def _unit_clip(v: Array) -> Array:
    """np.clip(v, 0, 1) in place, without np.clip's Python (v must not hold -0.0, where clip
    gives +0.0; NaN stays NaN in both)."""
    zero, one = _ZERO_ONE(v.dtype)
    np.maximum(v, zero, out=v)
    np.minimum(v, one, out=v)
    return v


_HARD_SWISH = typed_constants(1 / 6, 0.5)


@_act("HardSwish", 14)
def hard_swish(node: KernelNode) -> Callable[[Array], Array]:
    def f(x: Array) -> Any:
        sixth, half = _HARD_SWISH(x.dtype)
        if x.ndim == 0:
            t = x.dtype.type
            return x * np.clip(x * sixth + half, t(0), t(1))
        v = np.multiply(x, sixth)
        np.add(v, half, out=v)  # a sum with +0.5 is never -0.0
        return np.multiply(x, _unit_clip(v), out=v)

    return f


@_act("Softplus", 1)
def softplus(node: KernelNode) -> Callable[[Array], Array]:
    return _softplus


@_act("Softsign", 1)
def softsign(node: KernelNode) -> Callable[[Array], Array]:
    return lambda x: x / (x.dtype.type(1) + np.abs(x))


@_act("Gelu", 20)
def gelu(node: KernelNode) -> Callable[[Array], Array]:
    approximate = node.attr("approximate")
    if approximate == "tanh":
        return gelu_tanh
    if approximate != "none":
        raise InvalidArgument(
            f"{node.name}: Gelu approximate must be 'none' or 'tanh', got {approximate!r}"
        )
    return gelu_erf


@_act("Mish", 18)
def mish(node: KernelNode) -> Callable[[Array], Array]:
    return lambda x: x * np.tanh(_softplus(x))


@_act("ThresholdedRelu", 10)
def thresholded_relu(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha")
    return lambda x: np.where(x > x.dtype.type(alpha), x, x.dtype.type(0))


@_act("Swish", 24)
def swish(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha")
    if alpha == 1.0:
        return lambda x: x * _sigmoid(x)
    return lambda x: x * _sigmoid(x * x.dtype.type(alpha))


@_act("Shrink", 9)
def shrink(node: KernelNode) -> Callable[[Array], Array]:
    lambd, bias = node.attr("lambd"), node.attr("bias")

    def f(x: Array) -> Any:
        t = x.dtype.type
        b = t(bias)
        return np.where(x < -lambd, x + b, np.where(x > lambd, x - b, t(0)))

    return f
