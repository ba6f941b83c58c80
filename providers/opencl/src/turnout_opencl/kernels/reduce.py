"""Reductions (Reduce*, ArgMax/ArgMin) and the row-wise normalizers (Softmax, LogSoftmax,
Hardmax).

A reduction is generated from a table row: accumulator initial value, update, finish. One work
item computes one output element, walking the reduced dims through their input strides, so any
set of axes works without a transpose. Axes given as an input (opset 13/18) are host inputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import shape as shape_sem

from ..runtime import CTYPES, Runtime, buf, c_strides
from .base import FLOATS, INDEX, NUM, dtype_out, host_ints, ocl_kernel

__all__: list[str] = []

_LIMITS = {
    "char": ("CHAR_MIN", "CHAR_MAX"),
    "uchar": ("0", "UCHAR_MAX"),
    "short": ("SHRT_MIN", "SHRT_MAX"),
    "ushort": ("0", "USHRT_MAX"),
    "int": ("INT_MIN", "INT_MAX"),
    "uint": ("0", "UINT_MAX"),
    "long": ("LONG_MIN", "LONG_MAX"),
    "ulong": ("0", "ULONG_MAX"),
    "float": ("-INFINITY", "INFINITY"),
    "double": ("-INFINITY", "INFINITY"),
}
# op: (init, update (acc, v), finish (acc, count))
_REDUCE = {
    "ReduceSum": ("0", "acc += v;", "acc"),
    "ReduceMean": ("0", "acc += v;", "acc / (A)cnt"),
    "ReduceMax": ("LO", "acc = (v > acc || @ISNAN@) ? v : acc;", "acc"),
    "ReduceMin": ("HI", "acc = (v < acc || @ISNAN@) ? v : acc;", "acc"),
    "ReduceProd": ("1", "acc *= v;", "acc"),
    "ReduceL1": ("0", "acc += (v < 0 ? -v : v);", "acc"),
    "ReduceL2": ("0", "acc += v * v;", "sqrt((F)acc)"),
    "ReduceSumSquare": ("0", "acc += v * v;", "acc"),
    "ReduceLogSum": ("0", "acc += v;", "log((F)acc)"),
    "ReduceLogSumExp": ("0", "acc += exp((F)(v - mx));", "log((F)acc) + mx"),
}

_REDUCE_SRC = """
__kernel void reduce(long n, int r1, int r2, long cnt, __global const long* m,
                     __global {T}* out, __global const {T}* x) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long r = gid, base = 0;
  for (int d = r1 - 1; d >= 0; --d) {{
    long dim = m[d]; long c = r % dim; r /= dim; base += c * m[r1 + d];
  }}
  __global const long* rd = m + 2 * r1;
  {A} mx = 0;
  if (@TWO_PASS@) {{
    mx = @LO@;
    for (long j = 0; j < cnt; ++j) {{
      long q = j, off = base;
      for (int d = r2 - 1; d >= 0; --d) {{
        long dim = rd[d]; off += (q % dim) * rd[r2 + d]; q /= dim;
      }}
      {A} v = ({A})x[off];
      mx = (v > mx || @ISNAN@) ? v : mx;
    }}
    if (cnt == 0 || isinf((F)mx)) mx = 0;
  }}
  {A} acc = @INIT@;
  for (long j = 0; j < cnt; ++j) {{
    long q = j, off = base;
    for (int d = r2 - 1; d >= 0; --d) {{
        long dim = rd[d]; off += (q % dim) * rd[r2 + d]; q /= dim;
      }}
    {A} v = ({A})x[off];
    @UPDATE@
  }}
  out[gid] = ({T})(@FINISH@);
}}
"""


def _axes_of(kn: KernelNode, from_input: bool, axes: Any, rank: int) -> list[int] | None:
    ax = host_ints(axes) if from_input and axes is not None else kn.attr("axes")
    if ax is None or len(ax) == 0:
        if kn.attr("noop_with_empty_axes", 0):
            return []
        return list(range(rank))
    return list(shape_sem.reduce_axes(kn, ax, rank))


def _plan(shape: tuple[int, ...], axes: list[int], keep: bool) -> tuple[tuple[int, ...], Any, int]:
    st = c_strides(shape)
    kept = [d for d in range(len(shape)) if d not in axes]
    meta = tuple(shape[d] for d in kept) + tuple(st[d] for d in kept)
    meta += tuple(shape[d] for d in axes) + tuple(st[d] for d in axes)
    out_shape = (
        tuple(1 if d in axes else shape[d] for d in range(len(shape)))
        if keep
        else tuple(shape[d] for d in kept)
    )
    return out_shape, meta, len(kept)


def _reduce(kn: KernelNode, rt: Runtime, from_input: bool) -> KernelFn:
    op = kn.op_type
    dt = np.dtype(kn.inputs[0].dtype)
    T = CTYPES[dt]
    fl = dt.kind == "f"
    A = T if fl else ("long" if dt.kind == "i" else "ulong")
    if op in ("ReduceMax", "ReduceMin"):
        A = T
    F = T if fl else ("double" if rt.fp64 else "float")
    init, update, finish = _REDUCE[op]
    lo, hi = _LIMITS[A]
    defs = {
        "@INIT@": {"LO": lo, "HI": hi}.get(init, init),
        "@UPDATE@": update,
        "@FINISH@": finish,
        "@TWO_PASS@": int(op == "ReduceLogSumExp"),
        "@LO@": lo,
        "@ISNAN@": "isnan(v)" if fl else "0",
    }
    src = _REDUCE_SRC.format(T=T, A=A)
    for key, val in defs.items():
        src = src.replace(key, str(val))
    src = src.replace("(F)", f"({F})").replace("(A)", f"({A})")
    (k,) = rt.build(src, "reduce")
    keep = bool(kn.attr("keepdims", 1))

    def run(x: Any, axes: Any = None) -> tuple[Any]:
        shape = tuple(x.shape)
        ax = _axes_of(kn, from_input, axes, len(shape))
        if not ax:
            if op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"):
                return (x,)
            ax = []
        out_shape, meta, r1 = _plan(shape, ax, keep)
        out = rt.empty(out_shape, dt)
        cnt = math.prod(shape[d] for d in ax)
        rt.launch(
            k,
            out.size,
            np.int32(r1),
            np.int32(len(ax)),
            np.int64(cnt),
            rt.meta(meta),
            buf(out),
            buf(x) if x.size else buf(out),
        )
        return (out,)

    return run


def _reduce_supports(kn: KernelNode, rt: Runtime) -> str | None:
    return None


for _op in _REDUCE:
    _axes_input = 13 if _op == "ReduceSum" else 18
    ocl_kernel(_op, 1, until=_axes_input - 1, dtypes=NUM)(lambda kn, rt: _reduce(kn, rt, False))
    ocl_kernel(_op, _axes_input, dtypes=NUM, host_inputs=(1,))(lambda kn, rt: _reduce(kn, rt, True))


# ---------------------------------------------------------------------------- ArgMax / ArgMin
_ARG_SRC = """
__kernel void argred(long n, long len, long inner, int last, __global long* out,
                     __global const {T}* x) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long o = gid / inner, i = gid % inner;
  __global const {T}* p = x + o * len * inner + i;
  {T} best = p[0]; long bi = 0;
  for (long j = 1; j < len; ++j) {{
    {T} v = p[j * inner];
    if ((v CMP best) || (last && v == best)) {{ best = v; bi = j; }}
  }}
  out[gid] = bi;
}}
"""


def _argred(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    cmp = ">" if kn.op_type == "ArgMax" else "<"
    (k,) = rt.build(_ARG_SRC.format(T=CTYPES[dt]).replace("CMP", cmp), "argred")
    axis_attr = int(kn.attr("axis", 0))
    keep = bool(kn.attr("keepdims", 1))
    last = int(kn.attr("select_last_index", 0))

    def run(x: Any) -> tuple[Any]:
        shape = tuple(x.shape)
        axis = shape_sem.norm_axis(kn, axis_attr, len(shape), scalar=True)
        if shape[axis] == 0:
            raise InvalidArgument(f"{kn.name}: cannot take {kn.op_type} over an empty axis")
        out_shape = shape[:axis] + ((1,) if keep else ()) + shape[axis + 1 :]
        out = rt.empty(out_shape, np.int64)
        inner = math.prod(shape[axis + 1 :])
        rt.launch(
            k, out.size, np.int64(shape[axis]), np.int64(inner), np.int32(last), buf(out), buf(x)
        )
        return (out,)

    return run


ocl_kernel("ArgMax", 1, dtypes=NUM)(_argred)
ocl_kernel("ArgMin", 1, dtypes=NUM)(_argred)


# ---------------------------------------------------------------------------- Softmax family
_SOFTMAX_SRC = """
__kernel void rowwise(long n, long len, long inner, __global {T}* out, __global const {T}* x) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long o = gid / inner, i = gid % inner;
  long base = o * len * inner + i;
  {T} mx = -INFINITY; long am = 0;
  for (long j = 0; j < len; ++j) {{
    {T} v = x[base + j * inner];
    if (v > mx) {{ mx = v; am = j; }}
  }}
  {T} s = 0;
  if (MODE != 2) for (long j = 0; j < len; ++j) s += exp(x[base + j * inner] - mx);
  {T} ls = log(s);
  for (long j = 0; j < len; ++j) {{
    {T} v = x[base + j * inner] - mx;
    out[base + j * inner] = MODE == 0 ? exp(v) / s : (MODE == 1 ? v - ls : ({T})(j == am));
  }}
}}
"""
_MODES = {"Softmax": 0, "LogSoftmax": 1, "Hardmax": 2}


def _rowwise(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    src = f"#define MODE {_MODES[kn.op_type]}\n" + _SOFTMAX_SRC.format(T=CTYPES[dt])
    (k,) = rt.build(src, "rowwise")
    new = kn.since_version >= 13
    axis_attr = int(kn.attr("axis", -1 if new else 1))

    def run(x: Any) -> tuple[Any]:
        shape = tuple(x.shape)
        cut = shape_sem.norm_axis if new else shape_sem.cut_axis
        axis = cut(kn, axis_attr, len(shape))
        if new:
            length, inner = shape[axis], math.prod(shape[axis + 1 :])
        else:
            length, inner = math.prod(shape[axis:]), 1
        out = rt.empty(shape, dt)
        rows = math.prod(shape) // max(length, 1)
        if length:
            rt.launch(k, rows, np.int64(length), np.int64(inner), buf(out), buf(x))
        return (out,)

    return run


for _op in _MODES:
    ocl_kernel(_op, 1, dtypes=FLOATS)(_rowwise)

# ---------------------------------------------------------------------------- CumSum / CumProd
_CUM_SRC = """
__kernel void cum(long n, long len, long inner, int exclusive, int reverse,
                  __global {T}* out, __global const {T}* x) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long o = gid / inner, i = gid % inner;
  long base = o * len * inner + i;
  {T} acc = INIT;
  for (long t = 0; t < len; ++t) {{
    long j = reverse ? len - 1 - t : t;
    {T} v = x[base + j * inner];
    if (exclusive) {{ out[base + j * inner] = acc; acc = acc OP v; }}
    else {{ acc = acc OP v; out[base + j * inner] = acc; }}
  }}
}}
"""


def _cumulative(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    op, init = ("+", "0") if kn.op_type == "CumSum" else ("*", "1")
    src = f"#define OP {op}\n#define INIT (({CTYPES[dt]}){init})\n" + _CUM_SRC.format(T=CTYPES[dt])
    (k,) = rt.build(src, "cum")
    exclusive, reverse = int(kn.attr("exclusive", 0)), int(kn.attr("reverse", 0))

    def run(x: Any, axis: Any) -> tuple[Any]:
        a = np.asarray(axis)
        if a.size != 1:
            raise InvalidArgument(f"{kn.name}: axis must be a scalar, got shape {a.shape}")
        shape = tuple(x.shape)
        ax = shape_sem.norm_axis(kn, int(a.reshape(())), len(shape))
        out = rt.empty(shape, dt)
        length, inner = shape[ax], math.prod(shape[ax + 1 :])
        if out.size:
            rt.launch(
                k,
                out.size // length,
                np.int64(length),
                np.int64(inner),
                np.int32(exclusive),
                np.int32(reverse),
                buf(out),
                buf(x),
            )
        return (out,)

    return run


ocl_kernel("CumSum", 11, dtypes=NUM, host_inputs=(1,))(_cumulative)
ocl_kernel("CumProd", 26, dtypes=NUM, host_inputs=(1,))(_cumulative)

_ = (dtype_out, INDEX, _reduce_supports)
