"""Normalizations: LayerNormalization, RMSNormalization, BatchNormalization (inference),
InstanceNormalization.

One work item normalizes one row (LayerNorm: the trailing dims from `axis`; InstanceNorm: one
(n, c) plane) with a two-pass mean/variance in the accumulation type; BatchNorm is per element.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode

from ..runtime import CTYPES, Runtime, bcast_strides, buf, lit
from .base import FLOATS, norm_axis, ocl_kernel

__all__: list[str] = []

_LN_SRC = """
__kernel void layernorm(long n, long len, __global const long* m, __global {T}* y,
                        __global {T}* mean_out, __global {T}* inv_out,
                        __global const {T}* x, __global const {T}* s, __global const {T}* b,
                        int hasb, int want_stats, {T} eps, long s_stride0, long s_stride1,
                        long s_split, long per_row) {{
  long row = get_global_id(0);
  if (row >= n) return;
  __global const {T}* p = x + row * len;
  {A} mu = 0;
  for (long j = 0; j < len; ++j) mu += p[j];
  mu /= ({A})len;
  {A} var = 0;
  for (long j = 0; j < len; ++j) {{ {A} d = p[j] - mu; var += d * d; }}
  var /= ({A})len;
  {A} inv = 1 / sqrt(var + eps);
  for (long j = 0; j < len; ++j) {{
    long si = per_row ? row % per_row : (j / s_split) * s_stride0 + (j % s_split) * s_stride1;
    {A} v = (p[j] - mu) * inv * s[si];
    if (hasb) v += b[si];
    y[row * len + j] = ({T})v;
  }}
  if (want_stats) {{ mean_out[row] = ({T})mu; inv_out[row] = ({T})inv; }}
}}
__kernel void rmsnorm(long n, long len, __global {T}* y, __global const {T}* x,
                      __global const {T}* s, {T} eps, long s0, long s1, long split) {{
  long row = get_global_id(0);
  if (row >= n) return;
  __global const {T}* p = x + row * len;
  {A} ms = 0;
  for (long j = 0; j < len; ++j) {{ {A} v = p[j]; ms += v * v; }}
  ms /= ({A})len;
  {A} inv = 1 / sqrt(ms + eps);
  for (long j = 0; j < len; ++j)
    y[row * len + j] = ({T})(p[j] * inv * s[(j / split) * s0 + (j % split) * s1]);
}}
__kernel void batchnorm(long n, long C, long inner, __global {T}* y, __global const {T}* x,
                        __global const {T}* s, __global const {T}* b,
                        __global const {T}* mean, __global const {T}* var, {T} eps) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long c = (gid / inner) % C;
  y[gid] = (x[gid] - mean[c]) / sqrt(var[c] + eps) * s[c] + b[c];
}}
"""


def _program(rt: Runtime, dt: np.dtype[Any]) -> Any:
    A = "double" if dt == np.float64 else "float"
    return rt.build(_LN_SRC.format(T=CTYPES[dt], A=A), "layernorm", "batchnorm", "rmsnorm")[:2]


@ocl_kernel("RMSNormalization", 23, dtypes=FLOATS)
def rms_norm(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    A = "double" if dt == np.float64 else "float"
    (k,) = rt.build(_LN_SRC.format(T=CTYPES[dt], A=A), "rmsnorm")
    axis_attr = int(kn.attr("axis", -1))
    eps = dt.type(kn.attr("epsilon", 1e-5))

    def run(x: Any, scale: Any) -> tuple[Any]:
        shape = tuple(x.shape)
        axis = norm_axis(axis_attr, len(shape))
        tail = shape[axis:]
        try:
            if len(scale.shape) > len(tail):
                raise ValueError
            np.broadcast_shapes(tuple(scale.shape), tail)
        except ValueError:
            raise InvalidArgument(f"{kn.name}: scale {scale.shape} does not fit {tail}") from None
        s0, s1, split = _two_strides(tail, bcast_strides(tuple(scale.shape), tail))
        y = rt.empty(shape, dt)
        length = math.prod(tail)
        if y.size:
            rt.launch(
                k,
                math.prod(shape[:axis]),
                np.int64(length),
                buf(y),
                buf(x),
                buf(scale),
                eps,
                np.int64(s0),
                np.int64(s1),
                np.int64(split),
            )
        return (y,)

    return run


@ocl_kernel("LayerNormalization", 17, dtypes=FLOATS)
def layer_norm(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    k, _ = _program(rt, dt)
    axis_attr = int(kn.attr("axis", -1))
    eps = dt.type(kn.attr("epsilon", 1e-5))
    outs = kn.node.outputs
    want = len(outs) > 1 and any(outs[1:])

    def run(x: Any, scale: Any, bias: Any = None) -> tuple[Any, ...]:
        shape = tuple(x.shape)
        axis = norm_axis(axis_attr, len(shape))
        tail = shape[axis:]
        length = math.prod(tail)
        rows = math.prod(shape[:axis])
        try:
            np.broadcast_shapes(tuple(scale.shape), tail)
        except ValueError:
            raise InvalidArgument(f"{kn.name}: scale {scale.shape} does not fit {tail}") from None
        st = bcast_strides(tuple(scale.shape), tail)
        if bias is not None and bcast_strides(tuple(bias.shape), tail) != st:
            raise InvalidArgument(f"{kn.name}: bias {bias.shape} differs from scale {scale.shape}")
        # scale index = sum over tail dims; supported when it collapses to two strides
        s0, s1, split = _two_strides(tail, st)
        y = rt.empty(shape, dt)
        stat_shape = shape[:axis] + (1,) * len(tail)
        mean = rt.empty(stat_shape, dt)
        inv = rt.empty(stat_shape, dt)
        rt.launch(
            k,
            rows,
            np.int64(length),
            rt.empty_meta,
            buf(y),
            buf(mean),
            buf(inv),
            buf(x),
            buf(scale),
            buf(bias) if bias is not None else buf(scale),
            np.int32(bias is not None),
            np.int32(want),
            eps,
            np.int64(s0),
            np.int64(s1),
            np.int64(split),
            np.int64(0),
        )
        return (y, mean, inv)[: len(outs)]

    return run


def _two_strides(tail: tuple[int, ...], st: tuple[int, ...]) -> tuple[int, int, int]:
    """(outer stride, inner stride, split) so that index j maps to (j // split)*s0 +
    (j % split)*s1: exact for a scale that is full, scalar, or broadcast on a prefix/suffix."""
    full = math.prod(tail)
    if all(s == 0 for s in st):
        return 0, 0, max(full, 1)
    from ..runtime import c_strides

    if st == c_strides(tail):
        return 0, 1, max(full, 1)
    # broadcast over a leading block: scale varies only over trailing dims
    k = 0
    while k < len(st) and st[k] == 0:
        k += 1
    if st[k:] == c_strides(tail[k:]):
        return 0, 1, max(math.prod(tail[k:]), 1)  # index j % inner
    raise InvalidArgument(f"scale strides {st} over {tail} are not supported")


def _bn_supports(kn: KernelNode, rt: Runtime) -> str | None:
    if kn.attr("training_mode", 0) or len([o for o in kn.node.outputs if o]) > 1:
        return "BatchNormalization in training mode (running statistics) is not implemented"
    if kn.since_version < 9 and kn.attr("spatial", 1) == 0:
        return "BatchNormalization with spatial=0 is not implemented"
    return None


@ocl_kernel("BatchNormalization", 1, dtypes=FLOATS, supports=_bn_supports)
def batch_norm(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    _, k = _program(rt, dt)
    eps = dt.type(kn.attr("epsilon", 1e-5))

    def run(x: Any, s: Any, b: Any, mean: Any, var: Any) -> tuple[Any, ...]:
        shape = tuple(x.shape)
        c = shape[1] if len(shape) > 1 else 1
        y = rt.empty(shape, dt)
        rt.launch(
            k,
            y.size,
            np.int64(c),
            np.int64(math.prod(shape[2:])),
            buf(y),
            buf(x),
            buf(s),
            buf(b),
            buf(mean),
            buf(var),
            eps,
        )
        return (y,)

    return run


@ocl_kernel("InstanceNormalization", 6, dtypes=FLOATS)
def instance_norm(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    k, _ = _program(rt, dt)
    eps = dt.type(kn.attr("epsilon", 1e-5))

    def run(x: Any, s: Any, b: Any) -> tuple[Any]:
        shape = tuple(x.shape)
        n, c = shape[0], shape[1]
        length = math.prod(shape[2:])
        y = rt.empty(shape, dt)
        # rows are (n, c) planes: the scale index is row % C
        rt.launch(
            k,
            n * c,
            np.int64(length),
            rt.empty_meta,
            buf(y),
            buf(y),
            buf(y),
            buf(x),
            buf(s),
            buf(b),
            np.int32(1),
            np.int32(0),
            eps,
            np.int64(0),
            np.int64(0),
            np.int64(max(length, 1)),
            np.int64(c),
        )
        return (y,)

    return run


_ = lit
