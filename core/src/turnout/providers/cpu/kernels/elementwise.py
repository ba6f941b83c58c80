"""Element-wise kernels: unary math, broadcasting binary arithmetic/logic/comparison, variadic ops.

Most ops are one row in a table mapping the op to a numpy ufunc. Outputs keep the ONNX dtype:
binary ops on equal dtypes keep it natively; the few ops where numpy would promote (integer Div,
Pow with a differently typed exponent, Mean) cast back explicitly. Opset 1/6 binary ops carry the
legacy `broadcast`/`axis` attributes; `_legacy` handles them in front of the same ufunc.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.numerics import erf, tanh
from turnout.sdk.semantics.shape import norm_axis

__all__: list[str] = []

Array = np.ndarray[Any, Any]


# --------------------------------------------------------------------------------------------
# Unary ops: one table row each; registered once (no unary op changed semantics across versions).


def _round(x: Array) -> Array:
    return np.round(x) if x.dtype.kind != "i" and x.dtype.kind != "u" else x


_UNARY: dict[str, tuple[int, Callable[[Array], Any]]] = {
    "Abs": (1, np.abs),
    "Neg": (1, np.negative),
    "Ceil": (1, np.ceil),
    "Floor": (1, np.floor),
    "Round": (11, _round),  # numpy rounds half to even, as ONNX specifies
    "Sqrt": (1, np.sqrt),
    "Reciprocal": (1, np.reciprocal),
    "Exp": (1, np.exp),
    "Log": (1, np.log),
    "Tanh": (1, tanh),  # onnxruntime's MLAS tanh in float32
    "Sin": (7, np.sin),
    "Cos": (7, np.cos),
    "Tan": (7, np.tan),
    "Asin": (7, np.arcsin),
    "Acos": (7, np.arccos),
    "Atan": (7, np.arctan),
    "Sinh": (9, np.sinh),
    "Cosh": (9, np.cosh),
    "Asinh": (9, np.arcsinh),
    "Acosh": (9, np.arccosh),
    "Atanh": (9, np.arctanh),
    "Erf": (9, erf),
    "Sign": (9, np.sign),
    "IsNaN": (9, np.isnan),
    "Not": (1, np.logical_not),
    "BitwiseNot": (18, np.invert),
}


def _register_unary(op: str, since: int, fn: Callable[[Array], Any]) -> None:
    def factory(node: KernelNode) -> KernelFn:
        return lambda x: (np.asarray(fn(x)),)

    factory.__name__ = factory.__qualname__ = op.lower()
    cpu_kernel(op, since=since)(factory)


for _op, (_since, _fn) in _UNARY.items():
    _register_unary(_op, _since, _fn)


@cpu_kernel("IsInf", since=10)
def is_inf(node: KernelNode) -> KernelFn:
    neg, pos = node.attr("detect_negative"), node.attr("detect_positive")
    if neg and pos:
        return lambda x: (np.asarray(np.isinf(x)),)
    if pos:
        return lambda x: (np.asarray(x == np.inf),)
    if neg:
        return lambda x: (np.asarray(x == -np.inf),)
    return lambda x: (np.zeros(np.shape(x), np.bool_),)


# --------------------------------------------------------------------------------------------
# Binary ops with numpy broadcasting.


def _int_div(a: Array, b: Array) -> Array:
    """Integer division truncating toward zero (C semantics); numpy's // floors."""
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        fix = (q < 0) & (q * b != a)
        if fix.any():
            q = q + fix.astype(q.dtype)
    return q


def _div(a: Array, b: Array) -> Array:
    if a.dtype.kind in "iu":
        return _int_div(a, b)
    return np.divide(a, b)


def _pow(a: Array, b: Array) -> Array:
    """Power with the base's dtype whatever the exponent's type."""
    if b.ndim == 0 and b.dtype.kind in "fiu" and b == 2:
        return np.square(a)
    try:
        r = np.power(a, b)
    except ValueError:  # integer base to a negative integer power
        r = np.power(a.astype(np.float64), b)
    return r if r.dtype == a.dtype else r.astype(a.dtype)


def _binary_factory(op: str, fn: Callable[[Array, Array], Any]) -> Callable[[KernelNode], KernelFn]:
    def factory(node: KernelNode) -> KernelFn:
        name = node.name

        def run(a: Array, b: Array) -> tuple[Array]:
            try:
                return (np.asarray(fn(a, b)),)
            except ValueError as e:
                raise InvalidArgument(f"{name}: {op}: {e}") from None

        return run

    factory.__name__ = factory.__qualname__ = op.lower()
    return factory


def _legacy(
    fn: Callable[[Array, Array], Any],
) -> Callable[[KernelNode], Callable[[Array, Array], Any]]:
    """Opset 1/6 binary ops: with broadcast=1 and `axis`, B's dims align with A's from `axis`."""

    def make(node: KernelNode) -> Callable[[Array, Array], Any]:
        axis = node.attr("axis")
        if not node.attr("broadcast", 0) or axis is None:
            return fn

        def run(a: Array, b: Array) -> Any:
            ax = norm_axis(node, axis, a.ndim)
            trail = a.ndim - ax - b.ndim
            if trail < 0:
                raise ValueError(
                    f"B of rank {b.ndim} does not fit A of rank {a.ndim} at axis {axis}"
                )
            return fn(a, b.reshape(b.shape + (1,) * trail))

        return run

    return make


# op: (since of numpy-broadcast version, ufunc, since of legacy broadcast/axis version or None)
_BINARY: dict[str, tuple[int, Callable[[Array, Array], Any], int | None]] = {
    "Add": (7, np.add, 1),
    "Sub": (7, np.subtract, 1),
    "Mul": (7, np.multiply, 1),
    "Div": (7, _div, 1),
    "Pow": (7, _pow, 1),
    "And": (7, np.logical_and, 1),
    "Or": (7, np.logical_or, 1),
    "Xor": (7, np.logical_xor, 1),
    "Equal": (7, np.equal, 1),
    "Less": (7, np.less, 1),
    "Greater": (7, np.greater, 1),
    "LessOrEqual": (12, np.less_equal, None),
    "GreaterOrEqual": (12, np.greater_equal, None),
    "BitwiseAnd": (18, np.bitwise_and, None),
    "BitwiseOr": (18, np.bitwise_or, None),
    "BitwiseXor": (18, np.bitwise_xor, None),
}


def _register_binary(
    op: str, since: int, fn: Callable[[Array, Array], Any], legacy: int | None
) -> None:
    cpu_kernel(op, since=since)(_binary_factory(op, fn))
    if legacy is not None:
        make = _legacy(fn)

        def factory(node: KernelNode) -> KernelFn:
            return _binary_factory(op, make(node))(node)

        factory.__name__ = factory.__qualname__ = f"{op.lower()}_legacy"
        cpu_kernel(op, since=legacy)(factory)


for _op, (_since, _bfn, _legacy_since) in _BINARY.items():
    _register_binary(_op, _since, _bfn, _legacy_since)


@cpu_kernel("Mod", since=10)
def mod(node: KernelNode) -> KernelFn:
    # fmod=0: result takes the divisor's sign (Python/numpy `%`); fmod=1: C fmod (dividend's sign)
    return _binary_factory("Mod", np.fmod if node.attr("fmod") else np.mod)(node)


@cpu_kernel("BitShift", since=11)
def bit_shift(node: KernelNode) -> KernelFn:
    # numpy already yields 0 (or -1 for a negative signed value shifted right) for shift amounts
    # that are negative or at least the bit width, as BitShift-28 specifies.
    direction = node.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise InvalidArgument(
            f"{node.name}: BitShift direction must be LEFT or RIGHT, got {direction!r}"
        )
    return _binary_factory("BitShift", np.left_shift if direction == "LEFT" else np.right_shift)(
        node
    )


@cpu_kernel("PRelu", since=7)
def prelu(node: KernelNode) -> KernelFn:
    """slope broadcasts unidirectionally to X."""
    name = node.name
    legacy = node.since_version < 7

    def run(x: Array, slope: Array) -> tuple[Array]:
        if legacy and slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] > 1:
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))  # per-channel slope of opset 1/6
        try:
            r = np.where(x < 0, x * slope, x)
        except ValueError as e:
            raise InvalidArgument(f"{name}: PRelu: {e}") from None
        if r.shape != x.shape:
            raise InvalidArgument(
                f"{name}: PRelu slope {slope.shape} does not broadcast to X {x.shape}"
            )
        return (r,)

    return run


cpu_kernel("PRelu", since=1)(prelu)


@cpu_kernel("Where", since=9)
def where(node: KernelNode) -> KernelFn:
    name = node.name

    def run(c: Array, x: Array, y: Array) -> tuple[Array]:
        try:
            return (np.asarray(np.where(c, x, y)),)
        except ValueError as e:
            raise InvalidArgument(f"{name}: Where: {e}") from None

    return run


# --------------------------------------------------------------------------------------------
# Clip: bounds as attributes (float only) before opset 11, as optional scalar inputs after.


def _clip(x: Array, lo: Any, hi: Any) -> Array:
    # maximum-then-minimum sets everything to `hi` when lo > hi, as ONNX specifies
    r = x
    if lo is not None:
        r = np.maximum(r, lo)
    if hi is not None:
        r = np.minimum(r, hi)
    return np.asarray(r)


@cpu_kernel("Clip", since=1)
def clip_attr(node: KernelNode) -> KernelFn:
    lo, hi = node.attr("min"), node.attr("max")

    def run(x: Array) -> tuple[Array]:
        t = x.dtype.type
        return (_clip(x, None if lo is None else t(lo), None if hi is None else t(hi)),)

    return run


@cpu_kernel("Clip", since=11)
def clip(node: KernelNode) -> KernelFn:
    name = node.name

    def run(x: Array, lo: Array | None = None, hi: Array | None = None) -> tuple[Array]:
        for b in (lo, hi):
            if b is not None and b.size != 1:
                raise InvalidArgument(f"{name}: Clip bounds must be scalars, got shape {b.shape}")
        return (
            _clip(
                x,
                None if lo is None else lo.reshape(()).astype(x.dtype, copy=False),
                None if hi is None else hi.reshape(()).astype(x.dtype, copy=False),
            ),
        )

    return run


# --------------------------------------------------------------------------------------------
# Variadic Sum / Mean / Max / Min (numpy broadcasting; np.maximum/minimum propagate NaN).


def _variadic(
    op: str, uf: Callable[[Array, Array], Any], mean: bool = False
) -> Callable[[KernelNode], KernelFn]:
    def factory(node: KernelNode) -> KernelFn:
        name = node.name

        def run(*xs: Array) -> tuple[Array]:
            if not xs:
                raise InvalidArgument(f"{name}: {op} needs at least one input")
            try:
                r = functools.reduce(uf, xs) if len(xs) > 1 else xs[0]
            except ValueError as e:
                raise InvalidArgument(f"{name}: {op}: {e}") from None
            if mean and len(xs) > 1:
                r = np.divide(r, r.dtype.type(len(xs)))
            return (np.asarray(r),)

        return run

    factory.__name__ = factory.__qualname__ = op.lower()
    return factory


for _op, _uf in (("Sum", np.add), ("Max", np.maximum), ("Min", np.minimum)):
    cpu_kernel(_op, since=1)(_variadic(_op, _uf))
cpu_kernel("Mean", since=1)(_variadic("Mean", np.add, mean=True))
