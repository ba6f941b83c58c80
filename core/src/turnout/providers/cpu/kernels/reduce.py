"""Reduction kernels: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum, TopK.

Reduce* take `axes` as an attribute up to a version (ReduceSum 13, the others 18) and as an
optional input after, where `noop_with_empty_axes` decides what no axes means: reduce over all
axes, or over none, which still applies the op's elementwise part (ReduceSumSquare gives x*x,
ReduceL2 |x|, ReduceLogSum log(x)), as onnxruntime and onnx.reference do. Half-precision
inputs accumulate in float32 and are cast back. Before opset 13 the softmax family flattens the
input to 2-D at `axis`; from 13 it works along the one axis.

Reductions call the ufuncs' `reduce` directly (what `np.sum`/`np.max` call after ~1 us of
Python each) and keep their checked axes per (input rank, axes values).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.shape import cut_axis, norm_axis, reduce_axes

__all__: list[str] = []

Array = np.ndarray[Any, Any]
Axes = tuple[int, ...] | None

# the ufuncs' reductions, which np.sum/np.prod/np.max/np.min call after their Python wrapper
_ADD: Callable[..., Any] = np.add.reduce
_MUL: Callable[..., Any] = np.multiply.reduce
_MAX: Callable[..., Any] = np.maximum.reduce
_MIN: Callable[..., Any] = np.minimum.reduce


def _wide(x: Array) -> Any:
    """float16/bfloat16 accumulate in float32 (numpy would accumulate bfloat16 in bfloat16)."""
    return x.astype(np.float32) if x.dtype.itemsize <= 2 and x.dtype.kind in "fV" else x


def _sum(x: Array, axes: Axes, keep: bool) -> Any:
    w = _wide(x)
    return _ADD(w, axis=axes, keepdims=keep, dtype=w.dtype)


def _mean(x: Array, axes: Axes, keep: bool) -> Any:
    w = _wide(x)
    n = w.size if axes is None else math.prod(w.shape[a] for a in axes)
    s = _ADD(w, axis=axes, keepdims=keep, dtype=w.dtype)
    if w.dtype.kind in "iu":
        return _trunc_div(s, n) if n else s  # integer mean truncates toward zero, like C
    return np.divide(s, w.dtype.type(n))  # an empty set gives 0/0 = NaN


def _trunc_div(s: Array, n: int) -> Any:
    q = np.floor_divide(s, n)
    return q + ((q < 0) & (q * n != s)).astype(q.dtype)


def _extreme(
    fn: Callable[..., Array], empty: float, big: bool
) -> Callable[[Array, Axes, bool], Array]:
    def run(x: Array, axes: Axes, keep: bool) -> Any:
        if x.size:
            return (_MAX if big else _MIN)(x, axis=axes, keepdims=keep)
        # empty set: -inf / +inf, or the dtype's extreme where it has no infinities
        if x.dtype == np.bool_:
            init: Any = not big
        elif x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            init = info.min if big else info.max
        else:
            init = empty
        return fn(x, axis=axes, keepdims=keep, initial=init)

    return run


def _prod(x: Array, axes: Axes, keep: bool) -> Any:
    w = _wide(x)
    return _MUL(w, axis=axes, keepdims=keep, dtype=w.dtype)


def _l1(x: Array, axes: Axes, keep: bool) -> Any:
    return _sum(np.abs(x), axes, keep)


def _sum_square(x: Array, axes: Axes, keep: bool) -> Any:
    w = _wide(x)
    return _ADD(w * w, axis=axes, keepdims=keep, dtype=w.dtype)


def _l2(x: Array, axes: Axes, keep: bool) -> Any:
    s = _sum_square(x, axes, keep)
    return np.sqrt(s) if s.dtype.kind not in "iu" else np.sqrt(s).astype(s.dtype)


def _log_sum(x: Array, axes: Axes, keep: bool) -> Any:
    return np.log(_sum(x, axes, keep))


def _log_sum_exp(x: Array, axes: Axes, keep: bool) -> Any:
    w = _wide(x)
    if not w.size:
        return np.log(np.sum(w, axis=axes, keepdims=keep))
    m = np.max(w, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros_like(m))  # all -inf (or inf) rows: no shift
    s = np.log(np.sum(np.exp(w - m), axis=axes, keepdims=True)) + m
    return s if keep else np.squeeze(s, axis=axes)


_REDUCE: dict[str, tuple[int, Callable[[Array, Axes, bool], Array]]] = {
    # op: (first since-version taking axes as an input, reduction)
    "ReduceSum": (13, _sum),
    "ReduceMean": (18, _mean),
    "ReduceMax": (18, _extreme(np.max, -np.inf, big=True)),
    "ReduceMin": (18, _extreme(np.min, np.inf, big=False)),
    "ReduceProd": (18, _prod),
    "ReduceL1": (18, _l1),
    "ReduceL2": (18, _l2),
    "ReduceLogSum": (18, _log_sum),
    "ReduceLogSumExp": (18, _log_sum_exp),
    "ReduceSumSquare": (18, _sum_square),
}


def _reduce_factory(
    op: str, fn: Callable[[Array, Axes, bool], Array], axes_input: bool
) -> Callable[[KernelNode], KernelFn]:
    def factory(node: KernelNode) -> KernelFn:
        keep = bool(node.attr("keepdims", 1))
        noop = bool(node.attr("noop_with_empty_axes", 0)) and axes_input
        attr_axes = node.attr("axes")
        memo: tuple[Any, Any, Axes] = (None, None, None)  # (rank, axes values, checked axes)

        def run(x: Array, axes: Array | None = None) -> tuple[Array]:
            nonlocal memo
            want = None if axes is None else axes.tolist()
            rank, seen, norm = memo
            if x.ndim != rank or want != seen:
                norm = checked(x, axes)
                memo = (x.ndim, want, norm)
            r = fn(x, norm, keep)
            return (np.asarray(r).astype(x.dtype, copy=False),)

        def checked(x: Array, axes: Array | None) -> Axes:
            ax: Sequence[int] | None = attr_axes
            if axes_input:
                ax = None if axes is None or axes.size == 0 else axes.reshape(-1).tolist()
            if not ax:
                # no-op: a reduction over no axes (each element alone), not a pass-through
                return () if noop else None
            return reduce_axes(node, ax, x.ndim)

        return run

    factory.__name__ = factory.__qualname__ = op.lower()
    return factory


for _op, (_input_since, _fn) in _REDUCE.items():
    cpu_kernel(_op, since=1)(_reduce_factory(_op, _fn, axes_input=False))
    cpu_kernel(_op, since=_input_since)(_reduce_factory(_op, _fn, axes_input=True))


# --------------------------------------------------------------------------------------------
# ArgMax / ArgMin


def _arg_with_nan(x: Array, a: int, keep: bool, last: bool, big: bool) -> Any:
    """onnxruntime's scan: start at index 0 and move to a strictly better value (or an equal
    one with select_last_index). NaN compares false both ways, so it is chosen only at index 0;
    numpy's argmax would pick the first NaN anywhere."""
    nan = np.isnan(x)
    xs = np.where(nan, -np.inf if big else np.inf, x)
    best = (np.max if big else np.min)(xs, axis=a, keepdims=True)
    hit = ~nan & (xs == best)
    if last:
        idx = (x.shape[a] - 1) - np.argmax(np.flip(hit, a), axis=a, keepdims=True)
    else:
        idx = np.argmax(hit, axis=a, keepdims=True)
    idx = np.where(np.take(nan, [0], axis=a), 0, idx)
    return idx if keep else np.squeeze(idx, axis=a)


def _arg_factory(op: str, fn: Callable[..., Array]) -> Callable[[KernelNode], KernelFn]:
    def factory(node: KernelNode) -> KernelFn:
        name = node.name
        axis = node.attr("axis", 0)
        keep = bool(node.attr("keepdims", 1))
        last = bool(node.attr("select_last_index", 0))

        def run(x: Array) -> tuple[Array]:
            a = norm_axis(node, axis, x.ndim) if x.ndim else None
            if a is None:
                return (np.zeros((), np.int64),)
            n = x.shape[a]
            if n == 0:
                raise InvalidArgument(f"{name}: {op} over an empty axis {axis}")
            if x.dtype.kind in "fV" and np.isnan(x).any():
                idx = _arg_with_nan(x, a, keep, last, big=op == "ArgMax")
            elif last:
                idx = (n - 1) - fn(np.flip(x, a), axis=a, keepdims=keep)
            else:
                idx = fn(x, axis=a, keepdims=keep)
            return (np.asarray(idx, dtype=np.int64),)

        return run

    factory.__name__ = factory.__qualname__ = op.lower()
    return factory


cpu_kernel("ArgMax", since=1)(_arg_factory("ArgMax", np.argmax))
cpu_kernel("ArgMin", since=1)(_arg_factory("ArgMin", np.argmin))


# --------------------------------------------------------------------------------------------
# Softmax / LogSoftmax / Hardmax


def _softmax(x: Array, axis: int) -> Any:
    """exp(x - max) / sum, in one buffer."""
    e = np.subtract(x, _MAX(x, axis=axis, keepdims=True))
    np.exp(e, out=e)
    np.divide(e, _ADD(e, axis=axis, keepdims=True), out=e)
    return e


def _log_softmax(x: Array, axis: int) -> Any:
    s = np.subtract(x, _MAX(x, axis=axis, keepdims=True))
    np.subtract(s, np.log(_ADD(np.exp(s), axis=axis, keepdims=True)), out=s)
    return s


def _hardmax(x: Array, axis: int) -> Any:
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, idx, x.dtype.type(1), axis=axis)
    return out


def _softmax_factory(
    op: str, fn: Callable[[Array, int], Array], flatten: bool
) -> Callable[[KernelNode], KernelFn]:
    def factory(node: KernelNode) -> KernelFn:
        name = node.name
        axis = node.attr("axis", 1 if flatten else -1)
        # the last non-empty input's shape (flatten) or rank, and its 2-D shape or axis
        memo: tuple[Any, Any] = (None, None)

        def run(x: Array) -> tuple[Array]:
            seen, plan = memo
            if flatten:
                if x.shape == seen:
                    return (fn(x.reshape(plan), 1).reshape(x.shape),)
            elif x.ndim == seen and x.size:
                return (fn(x, plan),)
            return general(x)

        def general(x: Array) -> tuple[Array]:
            nonlocal memo
            if x.ndim == 0:
                raise InvalidArgument(f"{name}: {op} needs an input of rank >= 1")
            if flatten:
                a = cut_axis(node, axis, x.ndim)
                rows = int(np.prod(x.shape[:a], dtype=np.int64))
                x2 = x.reshape(rows, -1) if x.size else x.reshape(rows, int(np.prod(x.shape[a:])))
                if x2.size == 0:
                    return (x.copy(),)
                memo = (x.shape, x2.shape)
                return (fn(x2, 1).reshape(x.shape),)
            a = norm_axis(node, axis, x.ndim)
            if x.size == 0:
                return (x.copy(),)
            memo = (x.ndim, a)
            return (fn(x, a),)

        return run

    factory.__name__ = factory.__qualname__ = op.lower()
    return factory


for _op, _sfn in (("Softmax", _softmax), ("LogSoftmax", _log_softmax), ("Hardmax", _hardmax)):
    cpu_kernel(_op, since=1)(_softmax_factory(_op, _sfn, flatten=True))
    cpu_kernel(_op, since=13)(_softmax_factory(_op, _sfn, flatten=False))


# --------------------------------------------------------------------------------------------
# CumSum


@cpu_kernel("CumSum", since=11)
def cumsum(node: KernelNode) -> KernelFn:
    name = node.name
    exclusive = bool(node.attr("exclusive", 0))
    reverse = bool(node.attr("reverse", 0))

    def run(x: Array, axis: Array) -> tuple[Array]:
        if np.size(axis) != 1:
            raise InvalidArgument(
                f"{name}: CumSum axis must be a scalar, got shape {np.shape(axis)}"
            )
        a = norm_axis(node, int(np.reshape(axis, -1)[0]), x.ndim)
        w = _wide(x)
        if reverse:
            w = np.flip(w, a)
        r = np.cumsum(w, axis=a, dtype=w.dtype)
        if exclusive:
            shifted = np.zeros_like(r)
            dst = [slice(None)] * r.ndim
            src = [slice(None)] * r.ndim
            dst[a], src[a] = slice(1, None), slice(None, -1)
            shifted[tuple(dst)] = r[tuple(src)]
            r = shifted
        if reverse:
            r = np.flip(r, a)
        return (r.astype(x.dtype, copy=False),)

    return run


# --------------------------------------------------------------------------------------------
# TopK: ties keep the lower index first (stable sort; reversed for `largest`).


def _topk_factory(k_attr: bool) -> Callable[[KernelNode], KernelFn]:
    def factory(node: KernelNode) -> KernelFn:
        name = node.name
        axis = node.attr("axis", -1)
        largest = bool(node.attr("largest", 1))
        k_fixed = node.attr("k") if k_attr else None

        def run(x: Array, k_in: Array | None = None) -> tuple[Array, Array]:
            if k_attr:
                k = int(k_fixed) if k_fixed is not None else -1
            else:
                if k_in is None or np.size(k_in) != 1:
                    raise InvalidArgument(f"{name}: TopK K must be a 1-element tensor")
                k = int(np.reshape(k_in, -1)[0])
            a = norm_axis(node, axis, x.ndim)
            n = x.shape[a]
            if not 0 <= k <= n:
                raise InvalidArgument(f"{name}: TopK k={k} out of range for axis of size {n}")
            if largest:
                # stable ascending sort of the reversed axis, read backwards: descending values,
                # equal values in ascending original index order
                order = np.argsort(np.flip(x, a), axis=a, kind="stable")
                idx = (n - 1) - np.flip(order, a)
            else:
                idx = np.argsort(x, axis=a, kind="stable")
            idx = np.take(idx, np.arange(k), axis=a)
            return np.take_along_axis(x, idx, axis=a), idx.astype(np.int64, copy=False)

        return run

    factory.__name__ = factory.__qualname__ = "topk"
    return factory


cpu_kernel("TopK", since=1)(_topk_factory(k_attr=True))
cpu_kernel("TopK", since=10)(_topk_factory(k_attr=False))
