"""Activation kernels (Relu, Sigmoid, Gelu, ...): element-wise, dtype-preserving.

Each factory turns the op's attributes into a function of `x`; constants are converted to the
input's scalar type inside the kernel so float16/bfloat16/float32 inputs never promote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ....errors import InvalidArgument
from ....provider import KernelFn, KernelNode
from ..registry import cpu_kernel
from .elementwise import erf

__all__ = ["logistic"]

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


_SIGNED = {2: np.int16, 4: np.int32, 8: np.int64}
_BLEND_ABOVE = 4096  # elements: where np.where's per-element branch costs more than 3 passes


def logistic(x: Array) -> Array:
    """Numerically stable sigmoid: 1 / (1 + e) where x >= 0, else e / (1 + e), e = exp(-|x|).

    exp only ever sees non-positive arguments. Shared by Sigmoid, Swish, the fused ops' and
    the recurrent ops' activations. The values are those of the `np.where` form, in fewer
    passes: -|x| is x with its sign bit set, the numerator (1 or e) is chosen before the one
    division, with scalars of x's type (a Python scalar costs numpy ~1 us of type resolution
    per call). On large inputs the numerator is chosen by x's sign bit with integer ops, as
    np.where costs ~3.5 ns an element on a mixed-sign mask; at -0.0, where the sign bit and
    `x >= 0` disagree, both numerators give 0.5.
    """
    t = x.dtype.type
    one = t(1)
    signed = _SIGNED.get(x.dtype.itemsize)
    if x.ndim == 0 or signed is None:  # (a 0-d input's ufunc results are scalars: no `out=`)
        e0 = np.exp(-np.abs(x))
        return np.asarray(np.where(x >= 0, one / (one + e0), e0 / (one + e0)))
    xi = x.view(signed)
    bits = 8 * x.dtype.itemsize
    e = np.bitwise_or(xi, signed(-1) << (bits - 1)).view(x.dtype)  # -|x|
    np.exp(e, out=e)
    d = np.add(e, one)
    if x.size <= _BLEND_ABOVE:
        return np.divide(np.where(x < t(0), e, one), d, out=d)
    sign = np.right_shift(xi, bits - 1)  # -1 where x's sign bit is set, else 0
    ei, one_bits = e.view(signed), np.array(one).view(signed)[()]
    np.bitwise_xor(ei, one_bits, out=ei)
    np.bitwise_and(ei, sign, out=ei)
    np.bitwise_xor(ei, one_bits, out=ei)  # e where the sign bit is set, else 1
    return np.divide(e, d, out=d)


def _softplus(x: Array) -> Any:
    """log(1 + exp(x)) without overflow."""
    return np.maximum(x, x.dtype.type(0)) + np.log1p(np.exp(-np.abs(x)))


@_act("Relu", 1)
def relu(node: KernelNode) -> Callable[[Array], Array]:
    return lambda x: np.maximum(x, x.dtype.type(0))


@_act("LeakyRelu", 1)
def leaky_relu(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha", 0.01)
    return lambda x: np.where(x < x.dtype.type(0), x * x.dtype.type(alpha), x)


@_act("Elu", 1)
def elu(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha", 1.0)
    return lambda x: np.where(x < x.dtype.type(0), x.dtype.type(alpha) * np.expm1(x), x)


@_act("Selu", 1)
def selu(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha", 1.67326319217681884765625)
    gamma = node.attr("gamma", 1.05070102214813232421875)

    def f(x: Array) -> Any:
        t = x.dtype.type
        return np.where(x > t(0), t(gamma) * x, t(gamma * alpha) * np.expm1(x))

    return f


@_act("Celu", 12)
def celu(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha", 1.0)

    def f(x: Array) -> Any:
        a = x.dtype.type(alpha)
        return np.where(x > x.dtype.type(0), x, a * np.expm1(x / a))

    return f


@_act("Sigmoid", 1)
def sigmoid(node: KernelNode) -> Callable[[Array], Array]:
    return logistic


@_act("HardSigmoid", 1)
def hard_sigmoid(node: KernelNode) -> Callable[[Array], Array]:
    alpha, beta = node.attr("alpha", 0.2), node.attr("beta", 0.5)

    def f(x: Array) -> Any:
        t = x.dtype.type
        if t(beta) == 0 or x.ndim == 0:  # v may be -0, which clip and maximum sign apart
            return np.clip(x * t(alpha) + t(beta), t(0), t(1))
        v = np.multiply(x, t(alpha))
        np.add(v, t(beta), out=v)
        return _unit_clip(v)

    return f


def _unit_clip(v: Array) -> Array:
    """np.clip(v, 0, 1) in place, without np.clip's Python (v must not hold -0.0, where clip
    gives +0.0; NaN stays NaN in both)."""
    t = v.dtype.type
    np.maximum(v, t(0), out=v)
    np.minimum(v, t(1), out=v)
    return v


@_act("HardSwish", 14)
def hard_swish(node: KernelNode) -> Callable[[Array], Array]:
    def f(x: Array) -> Any:
        t = x.dtype.type
        if x.ndim == 0:
            return x * np.clip(x * t(1 / 6) + t(0.5), t(0), t(1))
        v = np.multiply(x, t(1 / 6))
        np.add(v, t(0.5), out=v)  # a sum with +0.5 is never -0.0
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
    approximate = node.attr("approximate", "none")
    if approximate == "tanh":

        def f(x: Array) -> Any:
            t = x.dtype.type
            inner = t(np.sqrt(2 / np.pi)) * (x + t(0.044715) * x * x * x)
            return t(0.5) * x * (t(1) + np.tanh(inner))

        return f
    if approximate != "none":
        raise InvalidArgument(
            f"{node.name}: Gelu approximate must be 'none' or 'tanh', got {approximate!r}"
        )
    return lambda x: x.dtype.type(0.5) * x * (x.dtype.type(1) + erf(x * x.dtype.type(np.sqrt(0.5))))


@_act("Mish", 18)
def mish(node: KernelNode) -> Callable[[Array], Array]:
    return lambda x: x * np.tanh(_softplus(x))


@_act("ThresholdedRelu", 10)
def thresholded_relu(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha", 1.0)
    return lambda x: np.where(x > x.dtype.type(alpha), x, x.dtype.type(0))


@_act("Swish", 24)
def swish(node: KernelNode) -> Callable[[Array], Array]:
    alpha = node.attr("alpha", 1.0)
    if alpha == 1.0:
        return lambda x: x * logistic(x)
    return lambda x: x * logistic(x * x.dtype.type(alpha))


@_act("Shrink", 9)
def shrink(node: KernelNode) -> Callable[[Array], Array]:
    lambd, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)

    def f(x: Array) -> Any:
        t = x.dtype.type
        b = t(bias)
        return np.where(x < -lambd, x + b, np.where(x > lambd, x - b, t(0)))

    return f
