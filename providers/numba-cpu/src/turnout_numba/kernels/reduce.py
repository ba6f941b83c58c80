"""Reductions (Reduce*): one generated row kernel per reduction kind, over a (pre, red, post) view.

The reduced axes are made one contiguous block (a transpose copy only when they are not
adjacent), so the kernel reads memory in order: for each `pre` (in parallel) it accumulates
`red` rows of `post` contiguous values. Floats accumulate in float64, ints in 64 bits; the
result is cast to the input dtype. `noop_with_empty_axes` with no axes reduces over none (each
element alone: a (1, 1, size) view), so ReduceSumSquare still squares. An empty reduction runs
turnout's numpy kernel (its identity-element rules are spelled out there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import types

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode
from turnout.providers.cpu.registry import CPU_KERNELS

from .. import cache
from ..codegen import compute_dtype, numba_array
from ..registry import BuildContext, numba_kernel

__all__: list[str] = []

# kind -> (dtype kinds, init, update (a: accumulator, v: value), finalize (a, n: count), first)
# `first`: initialize from the first row instead of `init` (max/min).
_KINDS: dict[str, tuple[str, str, str, str, bool]] = {
    "ReduceSum": ("fiu", "0", "a + v", "a", False),
    "ReduceMean": ("f", "0", "a + v", "a / n", False),
    "ReduceProd": ("fiu", "1", "a * v", "a", False),
    "ReduceSumSquare": ("f", "0", "a + v * v", "a", False),
    "ReduceL1": ("f", "0", "a + abs(v)", "a", False),
    "ReduceL2": ("f", "0", "a + v * v", "np.sqrt(a)", False),
    "ReduceLogSum": ("f", "0", "a + v", "np.log(a)", False),
    "ReduceMax": ("fiu", "0", "v if (v > a or v != v) else a", "a", True),
    "ReduceMin": ("fiu", "0", "v if (v < a or v != v) else a", "a", True),
}
# since-version where `axes` became an input (ReduceSum 13, the others 18)
_AXES_INPUT = {op: (13 if op == "ReduceSum" else 18) for op in [*_KINDS, "ReduceLogSumExp"]}


def _acc_dtype(kind: str, dt: np.dtype[Any]) -> str:
    if kind in ("ReduceMax", "ReduceMin"):
        return str(dt.name)
    return {"f": "float64", "i": "int64", "u": "uint64"}[str(dt.kind)]


def _source(op: str, acc: str, out: str) -> str:
    _, init, upd, fin, first = _KINDS.get(op, ("f", "0", "", "", False))
    A = f"np.{acc}"
    T = f"np.{out}"
    if op == "ReduceLogSumExp":
        body = f"""
        m = np.empty(post, {A})
        for p in range(post):
            m[p] = x[i, 0, p]
        for r in range(1, red):
            for p in range(post):
                v = {A}(x[i, r, p])
                if v > m[p] or v != v:
                    m[p] = v
        for p in range(post):
            if not np.isfinite(m[p]):
                m[p] = {A}(0) if m[p] == m[p] else m[p]
        s = np.zeros(post, {A})
        for r in range(red):
            for p in range(post):
                s[p] += np.exp({A}(x[i, r, p]) - m[p])
        for p in range(post):
            out[i, p] = {T}(m[p] + np.log(s[p]))
"""
    else:
        start = "1" if first else "0"
        init_line = "acc[p] = x[i, 0, p]" if first else f"acc[p] = {A}({init})"
        body = f"""
        acc = np.empty(post, {A})
        for p in range(post):
            {init_line}
        for r in range({start}, red):
            for p in range(post):
                v = {A}(x[i, r, p])
                a = acc[p]
                acc[p] = {upd}
        for p in range(post):
            a = acc[p]
            out[i, p] = {T}({fin})
"""
    return (
        "import numpy as np\nfrom numba import prange\n\n\n"
        "def kernel(x, out):\n"
        "    pre, red, post = x.shape\n"
        "    n = red\n"
        "    for i in prange(pre):" + body
    )


def _applies(kn: KernelNode) -> str | None:
    x = kn.inputs[0]
    if x is None or x.elem_type is None or x.dtype is None:
        return "input types unknown at session creation"
    c = compute_dtype(x.dtype)
    kinds = _KINDS.get(kn.op_type, ("f",))[0]
    if c is None or c.kind not in kinds or c == np.bool_:
        return f"{kn.op_type} on {x.dtype} is not compiled by numba"
    return None


def _numpy_kernel(kn: KernelNode) -> KernelFn:
    d, reason = CPU_KERNELS.match(kn)
    if d is None:
        raise InvalidArgument(f"{kn.name}: {reason}")
    return d.factory(kn)


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    op = kn.op_type
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    acc = _acc_dtype(op, c) if op != "ReduceLogSumExp" else "float64"
    mod = cache.load_source(_source(op, acc, c.name), "reduce")
    sig = types.void(
        numba_array(c, 3, readonly=True, layout="C"), numba_array(c, 2, readonly=False, layout="C")
    )
    kern = cache.jit(mod.kernel, [sig], parallel=ctx.parallel)
    fallback = _numpy_kernel(kn)
    axes_input = kn.since_version >= _AXES_INPUT[op]
    attr_axes = None if axes_input else kn.attr("axes")
    keepdims = bool(kn.attr("keepdims", 1))
    noop = bool(kn.attr("noop_with_empty_axes", 0))
    name = kn.name
    reduce = _reducer(kern, c, dt, keepdims, name)

    def run(x: Any, axes: Any = None) -> tuple[Any, ...]:
        ax = attr_axes if not axes_input else (None if axes is None else axes.tolist())
        if not ax:
            # no-op: a reduction over no axes, which keeps the elementwise part (x*x, |x|, ...)
            ax = [] if noop and axes_input else list(range(x.ndim))
        if x.size == 0:
            return tuple(fallback(x, axes) if axes_input else fallback(x))
        return (reduce(x, ax),)

    return run


def _reducer(
    kern: Any, c: np.dtype[Any], dt: np.dtype[Any], keepdims: bool, name: str
) -> Callable[[Any, list[int]], Any]:
    def reduce(x: Any, ax: list[int]) -> Any:
        nd = x.ndim
        try:
            axes = sorted({int(a) + nd if int(a) < 0 else int(a) for a in ax})
        except (TypeError, ValueError):
            raise InvalidArgument(f"{name}: bad axes {ax!r}") from None
        if any(a < 0 or a >= nd for a in axes):
            raise InvalidArgument(f"{name}: axes {ax} out of range for rank {nd}")
        if axes and axes[-1] - axes[0] + 1 != len(axes):  # not adjacent: move them together
            keep = [d for d in range(nd) if d not in axes]
            perm = [d for d in keep if d < axes[0]] + axes + [d for d in keep if d > axes[0]]
            xt = np.ascontiguousarray(x.transpose(perm))
            shape = xt.shape
            lo = perm.index(axes[0])
            hi = lo + len(axes)
        else:
            xt = np.ascontiguousarray(x)
            shape = xt.shape
            lo, hi = (axes[0], axes[-1] + 1) if axes else (0, 0)
        pre = int(np.prod(shape[:lo]))
        red = int(np.prod(shape[lo:hi]))
        post = int(np.prod(shape[hi:]))
        x3 = xt.reshape(pre, red, post)
        if x3.dtype != c:
            x3 = x3.astype(c)
        out = np.empty((pre, post), c)
        kern(x3, out)
        if keepdims:
            oshape = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
        else:
            oshape = tuple(s for d, s in enumerate(x.shape) if d not in axes)
        res = out.reshape(oshape)
        return res.astype(dt) if dt != c else res

    return reduce


for _op in [*_KINDS, "ReduceLogSumExp"]:
    numba_kernel(_op, since=1, applies=_applies)(_build)
