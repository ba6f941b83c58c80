"""Reductions, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax and CumSum/CumProd on `be.xp` (CuPy's
reduction kernels; CUB where CuPy uses it).

Axes come from the `axes` attribute up to the opset that moved them to an input (ReduceSum 13,
the others 18), where the input stays in host memory. An empty reduced extent gives the
reduction's identity (0 for sums, 1 for Prod, -inf for Max/LogSum/LogSumExp, +inf for Min).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import shape as shape_sem

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__ = ["REDUCTIONS"]

Reduce = Callable[[Any, Any, tuple[int, ...]], Any]


def _logsumexp(xp: Any, x: Any, axes: tuple[int, ...]) -> Any:
    m = xp.max(x, axis=axes, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    return xp.log(xp.sum(xp.exp(x - m), axis=axes, keepdims=True)) + m


REDUCTIONS: dict[str, tuple[int, Reduce, float]] = {
    # op: (opset where axes became an input, fn(xp, x, axes) with keepdims, empty identity)
    "ReduceSum": (13, lambda xp, x, a: xp.sum(x, axis=a, keepdims=True), 0.0),
    "ReduceMean": (18, lambda xp, x, a: xp.mean(x, axis=a, keepdims=True), np.nan),
    "ReduceMax": (18, lambda xp, x, a: xp.max(x, axis=a, keepdims=True), -np.inf),
    "ReduceMin": (18, lambda xp, x, a: xp.min(x, axis=a, keepdims=True), np.inf),
    "ReduceProd": (18, lambda xp, x, a: xp.prod(x, axis=a, keepdims=True), 1.0),
    "ReduceL1": (18, lambda xp, x, a: xp.sum(xp.abs(x), axis=a, keepdims=True), 0.0),
    "ReduceL2": (18, lambda xp, x, a: xp.sqrt(xp.sum(x * x, axis=a, keepdims=True)), 0.0),
    "ReduceSumSquare": (18, lambda xp, x, a: xp.sum(x * x, axis=a, keepdims=True), 0.0),
    "ReduceLogSum": (18, lambda xp, x, a: xp.log(xp.sum(x, axis=a, keepdims=True)), -np.inf),
    "ReduceLogSumExp": (18, _logsumexp, -np.inf),
}


def _identity(value: float, dtype: np.dtype[Any]) -> Any:
    """The reduction's identity in `dtype`: infinities become the integer limits, and for
    bool Max/Min False/True."""
    if dtype == np.bool_:
        return value > 0
    if dtype.kind in "iu" and np.isinf(value):
        info = np.iinfo(dtype)
        return info.max if value > 0 else info.min
    return value


def _reduce_builder(fn: Reduce, identity: float, from_input: bool) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        keep = bool(kn.attr("keepdims", 1))
        noop = bool(kn.attr("noop_with_empty_axes", 0))
        attr_axes = kn.attr("axes")

        def run(x: Any, axes_in: Any = None) -> tuple[Any]:
            raw = axes_in if from_input else attr_axes
            given = [] if raw is None else [int(a) for a in np.asarray(raw).ravel()]
            if not given and noop:
                return (x,)
            axes = shape_sem.reduce_axes(kn, given, x.ndim) if given else tuple(range(x.ndim))
            if any(x.shape[a] == 0 for a in axes):
                shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
                fill = _identity(identity, x.dtype)
                y = xp.full(shape, fill, dtype=x.dtype)
            else:
                y = fn(xp, x, axes).astype(x.dtype, copy=False)
            if not keep:
                y = y.reshape(tuple(d for k, d in enumerate(y.shape) if k not in axes))
            return (y,)

        return run

    return build


for _op, (_moved, _fn, _ident) in REDUCTIONS.items():
    cuda_kernel(_op, 1, until=_moved - 1)(_reduce_builder(_fn, _ident, False))
    cuda_kernel(_op, _moved, host_inputs=(1,))(_reduce_builder(_fn, _ident, True))


def _arg(pick: str) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        axis = int(kn.attr("axis", 0))
        keep = bool(kn.attr("keepdims", 1))
        last = bool(kn.attr("select_last_index", 0))
        f = getattr(xp, pick)

        def run(x: Any) -> tuple[Any]:
            ax = shape_sem.norm_axis(kn, axis, x.ndim)
            if last:
                n = x.shape[ax]
                y = (n - 1) - f(xp.flip(x, axis=ax), axis=ax)
            else:
                y = f(x, axis=ax)
            y = y.astype(np.int64)
            return (xp.expand_dims(y, ax) if keep else y,)

        return run

    return build


cuda_kernel("ArgMax", 11)(_arg("argmax"))
cuda_kernel("ArgMin", 11)(_arg("argmin"))


def _softmax_fn(xp: Any, kind: str) -> Callable[[Any, int], Any]:
    def softmax(x: Any, axis: int) -> Any:
        if kind == "Hardmax":
            idx = xp.argmax(x, axis=axis)
            return (xp.expand_dims(idx, axis) == _arange_along(xp, x.shape, axis)).astype(x.dtype)
        z = x - xp.max(x, axis=axis, keepdims=True)
        e = xp.exp(z)
        s = xp.sum(e, axis=axis, keepdims=True)
        return (z - xp.log(s) if kind == "LogSoftmax" else e / s).astype(x.dtype)

    return softmax


def _arange_along(xp: Any, shape: Sequence[int], axis: int) -> Any:
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return xp.arange(shape[axis]).reshape(view)


def _softmax_builder(kind: str, coerce_2d: bool) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        f = _softmax_fn(be.xp, kind)
        default = 1 if coerce_2d else -1
        axis = int(kn.attr("axis", default))

        def run(x: Any) -> tuple[Any]:
            cut = shape_sem.cut_axis if coerce_2d else shape_sem.norm_axis
            ax = cut(kn, axis, x.ndim)
            if x.size == 0:
                return (x.copy(),)
            if coerce_2d:  # opset < 13: the input as a 2-D matrix [prod(:axis), prod(axis:)]
                rows = int(np.prod(x.shape[:ax], dtype=np.int64))
                return (f(x.reshape(rows, -1), 1).reshape(x.shape),)
            return (f(x, ax),)

        return run

    return build


for _kind in ("Softmax", "LogSoftmax", "Hardmax"):
    cuda_kernel(_kind, 1, until=12, applies=float_only)(_softmax_builder(_kind, True))
    cuda_kernel(_kind, 13, applies=float_only)(_softmax_builder(_kind, False))


def _cumulative(kind: str) -> Any:
    """CumSum/CumProd; exclusive shifts the running result one step along the axis, starting
    from the identity (0 or 1), so a zero in CumProd's input does not need a division."""

    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        exclusive, reverse = bool(kn.attr("exclusive", 0)), bool(kn.attr("reverse", 0))
        scan, identity = (xp.cumsum, 0) if kind == "CumSum" else (xp.cumprod, 1)

        def run(x: Any, axis_in: Any) -> tuple[Any]:
            ax = shape_sem.norm_axis(kn, int(np.asarray(axis_in).ravel()[0]), x.ndim)
            y = xp.flip(x, axis=ax) if reverse else x
            c = scan(y, axis=ax, dtype=x.dtype)
            if exclusive and x.shape[ax]:
                lead = (slice(None),) * ax
                head, rest = (*lead, slice(0, 1)), (*lead, slice(0, -1))
                c = xp.concatenate([xp.full_like(c[head], identity), c[rest]], axis=ax)
            return (xp.flip(c, axis=ax) if reverse else c,)

        return run

    return build


cuda_kernel("CumSum", 11, host_inputs=(1,))(_cumulative("CumSum"))
cuda_kernel("CumProd", 26, host_inputs=(1,))(_cumulative("CumProd"))
