"""Reductions (Reduce*): one generated row kernel per reduction kind, over a (pre, red, post) view.

The reduced axes are made one contiguous block (a transpose copy only when they are not
adjacent), so the kernel reads memory in order: for each `pre` (in parallel) it accumulates
`red` rows of `post` contiguous values. Floats accumulate in float64, ints in 64 bits; the
result is cast to the input dtype. `noop_with_empty_axes` with no axes reduces over none (each
element alone: a (1, 1, size) view), so ReduceSumSquare still squares. An empty reduction runs
turnout's numpy kernel (its identity-element rules are spelled out there).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.shape import reduce_axes

from .. import cache
from ..codegen import compute_dtype, numba_array
from ..registry import BuildContext, numba_kernel, numpy_kernel
from .pool import row_max

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
        + ("" if op == "ReduceLogSumExp" else _rows_source(op, A, T))
        + "    for i in prange(pre):"
        + body
    )


_LANES = 8


def _rename(expr: str, name: str, new: str) -> str:
    return re.sub(rf"\b{name}\b", new, expr)


def _rows_source(op: str, A: str, T: str) -> str:
    """The branch for `post == 1` (a reduction over the last axes: text CNN's max over time,
    a mean over the features): each row is contiguous and reduced into `_LANES` independent
    accumulators that are combined at the end. One accumulator in memory, as the general loop
    has, is a dependency chain through a load and a store per element (measured 7 ns an
    element for ReduceMax of [100, 125] over the last axis; with lanes in registers LLVM
    interleaves them)."""
    _, init, upd, fin, first = _KINDS[op]
    # float max/min: the lanes compare without the NaN test, which kept LLVM from vectorizing
    # them (ReduceMax [100, 125]: 9.7 -> 7.6 us, before it moved to pool.row_max; ReduceMin
    # still runs here); a second, vectorized pass counts the NaNs, and a row holding one
    # reduces to NaN, as the NaN-propagating update would give
    nan_pass = first and "float" in A
    if nan_pass:
        upd = upd.replace(" or v != v", "")
    # combining two partial results: max/min and products as they update, sums by adding
    comb = upd if first else ("a * v" if op == "ReduceProd" else "a + v")
    lanes = range(_LANES)
    start = "1" if first else "0"
    # rows of the (pre, red) view: x[i, :, 0] is typed as a strided array, whose loops
    # (the NaN count above all) stay scalar
    lines = ["    if post == 1:", "        x2 = x.reshape(pre, red)"]
    lines += ["        for i in prange(pre):", "            row = x2[i]"]
    first_value = f"{A}(row[0])" if first else f"{A}({init})"
    lines += [f"            a{k} = {first_value}" for k in lanes]
    lines.append(f"            stop = {start} + (red - {start}) // {_LANES} * {_LANES}")
    lines.append(f"            for r in range({start}, stop, {_LANES}):")
    for k in lanes:
        u = _rename(_rename(upd, "a", f"a{k}"), "v", f"v{k}")
        lines += [f"                v{k} = {A}(row[r + {k}])", f"                a{k} = {u}"]
    u0 = _rename(upd, "a", "a0")
    lines += ["            for r in range(stop, red):", f"                v = {A}(row[r])"]
    lines.append(f"                a0 = {u0}")
    for k in lanes[1:]:
        lines += [f"            v = a{k}", f"            a0 = {_rename(comb, 'a', 'a0')}"]
    if nan_pass:
        lines += ["            nans = 0", "            for r in range(red):",
                  "                nans += row[r] != row[r]",
                  "            if nans:", f"                a0 = {A}(np.nan)"]  # fmt: skip
    lines += ["            a = a0", f"            out[i, 0] = {T}({fin})", "        return"]
    return "\n".join(lines) + "\n"


def _applies(kn: KernelNode) -> str | None:
    x = kn.inputs[0]
    if x is None or x.elem_type is None or x.dtype is None:
        return "input types unknown at session creation"
    c = compute_dtype(x.dtype)
    kinds = _KINDS.get(kn.op_type, ("f",))[0]
    if c is None or c.kind not in kinds or c == np.bool_:
        return f"{kn.op_type} on {x.dtype} is not compiled by numba"
    return None


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
    kern = ctx.jit(mod.kernel, [sig])  # small inputs run the serial variant
    fallback = numpy_kernel(kn)
    axes_input = kn.since_version >= _AXES_INPUT[op]
    attr_axes = None if axes_input else kn.attr("axes")
    keepdims = bool(kn.attr("keepdims", 1))
    noop = bool(kn.attr("noop_with_empty_axes", 0))
    name = kn.name
    # a max over trailing axes of floats: GlobalMaxPool's integer-key kernel, which LLVM
    # vectorizes (the node on [100, 125]: 9.4 -> 4.9 us; the lanes stay for the other kinds)
    rmax = row_max(c, ctx) if op == "ReduceMax" and c.name in ("float32", "float64") else None
    reduce = _reducer(kern, c, dt, keepdims, name, rmax)

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
    kern: Any,
    c: np.dtype[Any],
    dt: np.dtype[Any],
    keepdims: bool,
    name: str,
    rmax: Callable[[Any, Any], None] | None = None,
) -> Callable[[Any, list[int]], Any]:
    plans: dict[tuple[tuple[int, ...], tuple[int, ...]], _Plan] = {}

    def reduce(x: Any, ax: list[int]) -> Any:
        key = (x.shape, tuple(ax))
        p = plans.get(key)
        if p is None:  # the shape work, once per (shape, axes): a model repeats them
            p = plans[key] = _plan(x.shape, ax, keepdims, name)
        xt = np.ascontiguousarray(x if p.perm is None else x.transpose(p.perm))
        x3 = xt.reshape(p.x3)
        if x3.dtype != c:
            x3 = x3.astype(c)
        out = np.empty(p.x3[::2], c)
        if rmax is not None and p.x3[2] == 1:
            rmax(x3.reshape(p.x3[:2]), out.reshape(-1))
        else:
            kern(x3.size, x3, out)
        res = out.reshape(p.out)
        return res.astype(dt) if dt != c else res

    return reduce


@dataclass(frozen=True)
class _Plan:
    perm: list[int] | None  # a transpose bringing the reduced axes together, when they are not
    x3: tuple[int, int, int]  # (pre, red, post)
    out: tuple[int, ...]


def _plan(shape: tuple[int, ...], ax: list[int], keepdims: bool, name: str) -> _Plan:
    nd = len(shape)
    axes = list(reduce_axes(name, ax, nd))
    perm = None
    tshape = shape
    lo, hi = (axes[0], axes[-1] + 1) if axes else (0, 0)
    if axes and axes[-1] - axes[0] + 1 != len(axes):  # not adjacent: move them together
        keep = [d for d in range(nd) if d not in axes]
        perm = [d for d in keep if d < axes[0]] + axes + [d for d in keep if d > axes[0]]
        tshape = tuple(shape[d] for d in perm)
        lo = perm.index(axes[0])
        hi = lo + len(axes)
    x3 = (math.prod(tshape[:lo]), math.prod(tshape[lo:hi]), math.prod(tshape[hi:]))
    if keepdims:
        out = tuple(1 if d in axes else s for d, s in enumerate(shape))
    else:
        out = tuple(s for d, s in enumerate(shape) if d not in axes)
    return _Plan(perm, x3, out)


for _op in [*_KINDS, "ReduceLogSumExp"]:
    numba_kernel(_op, since=1, applies=_applies)(_build)
