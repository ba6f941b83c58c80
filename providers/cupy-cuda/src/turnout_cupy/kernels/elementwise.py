"""Elementwise kernels on `be.xp`: unary math, broadcasting binary ops, variadic ops, Where,
Clip, Cast, BitCast and the activations, each op one row of a table.

On a GPU the float32/float64 nodes of the ops in `codegen.FUSED_OPS` are fused into generated
CUDA (`fusion`); these kernels run the rest (integer and float16 tensors, comparisons, logic,
bit ops) as CuPy elementwise calls, and they are what the emulated backend runs for fused groups.
Binary ops start at opset 7 (numpy broadcasting); the legacy `broadcast`/`axis` attributes of
opsets 1 and 6 are declined.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.dtypes import np_dtype
from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.activations import selu_scales

from ..backend import Backend
from .registry import cuda_kernel, float_only, numeric_only

__all__ = ["ACTIVATIONS", "BINARY", "UNARY"]

Unary = Callable[[Backend, KernelNode], Callable[[Any], Any]]


def _ufunc(name: str) -> Unary:
    return lambda be, kn: getattr(be.xp, name)


def _sigmoid(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    xp = be.xp

    def f(x: Any) -> Any:
        e = xp.exp(-xp.abs(x))  # no overflow: exp of a non-positive number
        return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)

    return f


def _softplus(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    xp = be.xp
    return lambda x: (xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))).astype(x.dtype)


def _attr(kn: KernelNode, name: str) -> float:
    """A float attribute, or its schema default: a float32 value in ONNX (as onnxruntime reads
    it)."""
    return float(np.float32(kn.attr(name)))


def _leaky(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    a = _attr(kn, "alpha")
    return lambda x: be.xp.where(x >= 0, x, x * x.dtype.type(a))


def _elu(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    a = _attr(kn, "alpha")
    return lambda x: be.xp.where(x >= 0, x, (be.xp.expm1(x) * a).astype(x.dtype))


def _selu(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    g, ga = selu_scales(_attr(kn, "alpha"), _attr(kn, "gamma"))  # the CPU provider's order
    xp = be.xp

    def run(x: Any) -> Any:
        t = x.dtype.type
        e = xp.expm1(x.astype(np.float64)).astype(x.dtype)  # as semantics.numerics.expm1
        return xp.where(x > 0, x * t(g), e * t(ga)).astype(x.dtype)

    return run


def _celu(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    a = _attr(kn, "alpha")
    xp = be.xp
    return lambda x: (xp.maximum(x, 0) + xp.minimum(0, xp.expm1(x / a) * a)).astype(x.dtype)


def _hard_sigmoid(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    a, b = _attr(kn, "alpha"), _attr(kn, "beta")
    return lambda x: be.xp.clip(x * a + b, 0, 1).astype(x.dtype)


def _hard_swish(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    return lambda x: (x * be.xp.clip(x / 6 + 0.5, 0, 1)).astype(x.dtype)


def _softsign(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    return lambda x: x / (1 + be.xp.abs(x))


def _mish(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    sp = _softplus(be, kn)
    return lambda x: (x * be.xp.tanh(sp(x))).astype(x.dtype)


def _gelu(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    xp = be.xp
    if kn.attr("approximate") == "tanh":
        c = float(np.sqrt(2 / np.pi))
        return lambda x: (0.5 * x * (1 + xp.tanh(c * (x + 0.044715 * x**3)))).astype(x.dtype)
    return lambda x: (0.5 * x * (1 + be.erf(x * float(np.sqrt(0.5))))).astype(x.dtype)


def _thresholded(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    a = _attr(kn, "alpha")
    return lambda x: be.xp.where(x > a, x, x.dtype.type(0))


def _shrink(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    lam, bias = _attr(kn, "lambd"), _attr(kn, "bias")
    xp = be.xp

    def f(x: Any) -> Any:
        return xp.where(x < -lam, x + bias, xp.where(x > lam, x - bias, 0)).astype(x.dtype)

    return f


def _relu(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    return lambda x: be.xp.where(x < 0, x.dtype.type(0), x)


def _erf(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    return be.erf


def _round(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    return lambda x: be.xp.round(x)  # half to even, as ONNX specifies


def _reciprocal(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    return lambda x: (1 / x).astype(x.dtype)


def _is_inf(be: Backend, kn: KernelNode) -> Callable[[Any], Any]:
    pos, neg = int(kn.attr("detect_positive")), int(kn.attr("detect_negative"))
    xp = be.xp
    return lambda x: xp.isinf(x) & (((x > 0) & bool(pos)) | ((x < 0) & bool(neg)))


UNARY: dict[str, tuple[int, Unary, bool]] = {
    # op: (since, fn, float only)
    "Abs": (6, _ufunc("abs"), False),
    "Relu": (6, _relu, False),  # integer types from opset 14
    "Neg": (6, _ufunc("negative"), False),
    "Sign": (9, _ufunc("sign"), False),
    "Not": (1, _ufunc("logical_not"), False),
    "BitwiseNot": (18, _ufunc("invert"), False),
    "IsNaN": (9, _ufunc("isnan"), True),
    "IsInf": (10, _is_inf, True),
    "Ceil": (6, _ufunc("ceil"), True),
    "Floor": (6, _ufunc("floor"), True),
    "Round": (11, _round, True),
    "Sqrt": (6, _ufunc("sqrt"), True),
    "Exp": (6, _ufunc("exp"), True),
    "Log": (6, _ufunc("log"), True),
    "Tanh": (6, _ufunc("tanh"), True),
    "Sin": (7, _ufunc("sin"), True),
    "Cos": (7, _ufunc("cos"), True),
    "Tan": (7, _ufunc("tan"), True),
    "Asin": (7, _ufunc("arcsin"), True),
    "Acos": (7, _ufunc("arccos"), True),
    "Atan": (7, _ufunc("arctan"), True),
    "Sinh": (9, _ufunc("sinh"), True),
    "Cosh": (9, _ufunc("cosh"), True),
    "Asinh": (9, _ufunc("arcsinh"), True),
    "Acosh": (9, _ufunc("arccosh"), True),
    "Atanh": (9, _ufunc("arctanh"), True),
    "Erf": (9, _erf, True),
    "Reciprocal": (6, _reciprocal, True),
}

ACTIVATIONS: dict[str, tuple[int, Unary]] = {
    "Sigmoid": (6, _sigmoid),
    "LeakyRelu": (6, _leaky),
    "Elu": (6, _elu),
    "Selu": (6, _selu),
    "Celu": (12, _celu),
    "HardSigmoid": (6, _hard_sigmoid),
    "HardSwish": (14, _hard_swish),
    "Softplus": (1, _softplus),
    "Softsign": (1, _softsign),
    "Mish": (18, _mish),
    "Gelu": (20, _gelu),
    "ThresholdedRelu": (10, _thresholded),
    "Shrink": (9, _shrink),
}


def _unary_builder(fn: Unary) -> Callable[[KernelNode, Backend], KernelFn]:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        f = fn(be, kn)
        return lambda x: (f(x),)

    return build


for _op, (_since, _ufn, _float) in UNARY.items():
    cuda_kernel(_op, _since, applies=float_only if _float else numeric_only)(_unary_builder(_ufn))
for _op, (_since, _afn) in ACTIVATIONS.items():
    cuda_kernel(_op, _since, applies=float_only)(_unary_builder(_afn))


# --------------------------------------------------------------------------------------------
# Binary ops (numpy broadcasting, ONNX since opset 7)

Binary = Callable[[Any, Any, Any], Any]


def _div(xp: Any, a: Any, b: Any) -> Any:
    if a.dtype.kind in "iu":  # C division: truncate toward zero (numpy's // floors)
        q = xp.floor_divide(a, b)
        fix = (xp.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return (q + fix).astype(a.dtype)
    return xp.divide(a, b).astype(a.dtype)


def _pow(xp: Any, a: Any, b: Any) -> Any:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return xp.power(a, b.astype(a.dtype))
    return xp.power(a.astype(np.float64) if a.dtype != b.dtype else a, b).astype(a.dtype)


def _fn(name: str) -> Binary:
    return lambda xp, a, b: getattr(xp, name)(a, b)


BINARY: dict[str, tuple[int, Binary]] = {
    "Add": (7, _fn("add")),
    "Sub": (7, _fn("subtract")),
    "Mul": (7, _fn("multiply")),
    "Div": (7, _div),
    "Pow": (7, _pow),
    "PRelu": (7, lambda xp, x, s: xp.where(x < 0, x * s, x).astype(x.dtype)),
    "Equal": (7, _fn("equal")),
    "Less": (7, _fn("less")),
    "Greater": (7, _fn("greater")),
    "LessOrEqual": (12, _fn("less_equal")),
    "GreaterOrEqual": (12, _fn("greater_equal")),
    "And": (7, _fn("logical_and")),
    "Or": (7, _fn("logical_or")),
    "Xor": (7, _fn("logical_xor")),
    "BitwiseAnd": (18, _fn("bitwise_and")),
    "BitwiseOr": (18, _fn("bitwise_or")),
    "BitwiseXor": (18, _fn("bitwise_xor")),
}


def _binary_builder(fn: Binary) -> Callable[[KernelNode, Backend], KernelFn]:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        return lambda a, b: (fn(xp, a, b),)

    return build


for _op, (_since, _bfn) in BINARY.items():
    cuda_kernel(_op, _since)(_binary_builder(_bfn))


@cuda_kernel("Mod", 10)
def mod(kn: KernelNode, be: Backend) -> KernelFn:
    """fmod=1: C's fmod (sign of the dividend); fmod=0: the divisor's sign (integers only)."""
    xp = be.xp
    if int(kn.attr("fmod")):
        return lambda a, b: (xp.fmod(a, b),)
    return lambda a, b: (xp.remainder(a, b),)


@cuda_kernel("BitShift", 11)
def bit_shift(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    f = xp.left_shift if kn.attr("direction") == "LEFT" else xp.right_shift
    return lambda a, b: (f(a, b),)


def _variadic(kn: KernelNode, be: Backend, f: Callable[[Any, Any], Any]) -> KernelFn:
    def run(*xs: Any) -> tuple[Any]:
        out = xs[0]
        for x in xs[1:]:
            out = f(out, x)
        return (out if len(xs) > 1 else out.copy(),)

    return run


@cuda_kernel("Max", 8)
def max_(kn: KernelNode, be: Backend) -> KernelFn:
    return _variadic(kn, be, be.xp.maximum)


@cuda_kernel("Min", 8)
def min_(kn: KernelNode, be: Backend) -> KernelFn:
    return _variadic(kn, be, be.xp.minimum)


@cuda_kernel("Sum", 8)
def sum_(kn: KernelNode, be: Backend) -> KernelFn:
    return _variadic(kn, be, be.xp.add)


@cuda_kernel("Mean", 8, applies=float_only)
def mean(kn: KernelNode, be: Backend) -> KernelFn:
    total = _variadic(kn, be, be.xp.add)

    def run(*xs: Any) -> tuple[Any]:
        (s,) = total(*xs)
        return ((s / len(xs)).astype(s.dtype),)

    return run


@cuda_kernel("Where", 9)
def where(kn: KernelNode, be: Backend) -> KernelFn:
    return lambda c, a, b: (be.xp.where(c, a, b),)


@cuda_kernel("Clip", 11)
def clip(kn: KernelNode, be: Backend) -> KernelFn:
    """min/max as optional scalar inputs; NaN stays NaN (numpy's maximum/minimum)."""
    xp = be.xp

    def run(x: Any, lo: Any = None, hi: Any = None) -> tuple[Any]:
        out = x if lo is None else xp.maximum(x, lo.astype(x.dtype))
        out = out if hi is None else xp.minimum(out, hi.astype(x.dtype))
        return (out if out is not x else x.copy(),)

    return run


@cuda_kernel("Cast", 6)
def cast(kn: KernelNode, be: Backend) -> KernelFn:
    to = np_dtype(int(kn.attr("to")))
    return lambda x: (x.astype(to),)


@cuda_kernel("CastLike", 15)
def cast_like(kn: KernelNode, be: Backend) -> KernelFn:
    return lambda x, like: (x.astype(like.dtype),)


@cuda_kernel("BitCast", 26)
def bit_cast(kn: KernelNode, be: Backend) -> KernelFn:
    """The same bytes read as `to` (a view, copied first when strided); the widths must match."""
    to = np_dtype(int(kn.attr("to")))

    def run(x: Any) -> tuple[Any]:
        if x.dtype.itemsize != to.itemsize:
            raise InvalidArgument(
                f"BitCast node {kn.name!r}: {x.dtype} ({8 * x.dtype.itemsize} bits) and {to} "
                f"({8 * to.itemsize} bits) differ in width"
            )
        return ((x if x.flags.c_contiguous else x.copy()).view(to),)

    return run


@cuda_kernel("Identity", 1)
def identity(kn: KernelNode, be: Backend) -> KernelFn:
    return lambda x: (x,)
