"""Normalizations: LayerNormalization, RMSNormalization, BatchNormalization (inference),
InstanceNormalization.

One work item normalizes one row (LayerNorm: the trailing dims from `axis`; InstanceNorm: one
(n, c) plane) with a two-pass mean/variance in the accumulation type; BatchNorm is per element.
LayerNormalization writes Mean and InvStdDev in their declared type (float32 by stash_type=1,
also for a float64 input, as onnxruntime and the CPU provider do).

Every parameter a kernel indexes is checked against the input first (declined at session
creation when the shapes are known then, InvalidArgument in the run otherwise): a kernel never
reads past a buffer (an empty InstanceNormalization scale crashed the process).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import shape as shape_sem

from ..runtime import CTYPES, Runtime, bcast_strides, buf, lit
from .base import FLOATS, ocl_kernel

__all__: list[str] = []

_LN_SRC = """
__kernel void layernorm(long n, long len, __global const long* m, __global {T}* y,
                        __global {M}* mean_out, __global {V}* inv_out,
                        __global const {T}* x, __global const {T}* s, __global const {T}* b,
                        int hasb, int want_stats, {T} eps, long s_stride0, long s_stride1,
                        long s_split, long b_stride0, long b_stride1, long b_split,
                        long per_row) {{
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
    if (hasb) v += b[per_row ? si : (j / b_split) * b_stride0 + (j % b_split) * b_stride1];
    y[row * len + j] = ({T})v;
  }}
  if (want_stats) {{ mean_out[row] = ({M})mu; inv_out[row] = ({V})inv; }}
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


def _index_form(scale: tuple[int, ...], tail: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(s0, s1, split) such that element j of a normalized row reads the broadcast `scale` at
    (j // split) * s0 + (j % split) * s1, or None when no such form exists.

    Size-1 dims do not move the index; what is left is runs of dims where the scale varies
    (V) or is broadcast (B). Scalar (B), full (V), varying over trailing dims (B V) and over
    leading dims (V B: a per-channel scale with axis=-3) have the form; B V B and V B V
    would need a second split, which the kernel does not take.
    """
    runs: list[list[Any]] = []  # [broadcast?, elements]
    for d, st in zip(tail, bcast_strides(scale, tail)):
        if d != 1:
            if runs and runs[-1][0] == (st == 0):
                runs[-1][1] *= d
            else:
                runs.append([st == 0, d])
    kinds = [b for b, _ in runs]
    full = max(math.prod(tail), 1)
    if kinds in ([], [True]):
        return 0, 0, full
    if kinds == [False]:
        return 0, 1, full
    if kinds == [True, False]:
        return 0, 1, int(runs[1][1])  # j % inner
    if kinds == [False, True]:
        return 1, 0, int(runs[1][1])  # j // broadcast block
    return None


def _fits(scale: tuple[int, ...], tail: tuple[int, ...]) -> bool:
    """Whether `scale` broadcasts to exactly `tail` (no dims of its own beyond it)."""
    if len(scale) > len(tail):
        return False
    try:
        return tuple(np.broadcast_shapes(scale, tail)) == tail
    except ValueError:
        return False


def _row_index(
    kn: KernelNode, what: str, scale: tuple[int, ...], tail: tuple[int, ...]
) -> tuple[int, int, int]:
    """`_index_form` of a scale or bias at run time; InvalidArgument when it does not fit.
    A pattern without the form is declined in get_capability when shapes are known then."""
    if not _fits(scale, tail):
        raise InvalidArgument(f"{kn.name}: {what} {scale} does not fit {tail}")
    form = _index_form(scale, tail)
    if form is None:
        raise InvalidArgument(
            f"{kn.name}: {what} {scale} broadcast over {tail} is not supported by the OpenCL "
            "kernel (and its shapes were unknown at session creation)"
        )
    return form


def _norm_supports(kn: KernelNode, rt: Runtime) -> str | None:
    """Decline a scale/bias whose broadcast over the normalized dims has no `_index_form`,
    when the shapes are known at session creation (else the run checks them)."""
    x = kn.inputs[0]
    if x is None or x.shape is None:
        return None
    rank = len(x.shape)
    axis = int(kn.attr("axis", -1))
    if not -rank <= axis < rank:
        return None  # the run raises InvalidArgument, as the CPU provider does
    # an unknown dim of x counts as > 1: the form only gets simpler if it turns out to be 1
    tail = tuple(d if isinstance(d, int) else 2 for d in x.shape[axis:])
    for i, what in ((1, "scale"), (2, "bias")):
        info = kn.inputs[i] if i < len(kn.inputs) else None
        if info is None or info.shape is None or not all(isinstance(d, int) for d in info.shape):
            continue
        shape = tuple(int(d) for d in info.shape)
        if _fits(shape, tail) and _index_form(shape, tail) is None:
            return (
                f"{kn.op_type}: a {what} of shape {shape} broadcast over the normalized dims "
                f"{tuple(x.shape[axis:])} is not supported by the OpenCL kernel"
            )
    return None


def _src(dt: np.dtype[Any], stats: tuple[np.dtype[Any], np.dtype[Any]] | None = None) -> str:
    """The program for input dtype `dt`; LayerNorm's Mean/InvStdDev in `stats` (default `dt`)."""
    m, v = stats or (dt, dt)
    A = "double" if dt == np.float64 else "float"
    return _LN_SRC.format(T=CTYPES[dt], A=A, M=CTYPES[m], V=CTYPES[v])


def _program(rt: Runtime, dt: np.dtype[Any], stats: Any = None) -> Any:
    return rt.build(_src(dt, stats), "layernorm", "batchnorm", "rmsnorm")[:2]


_STATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def _stat_dtypes(kn: KernelNode) -> tuple[np.dtype[Any], np.dtype[Any]]:
    """LayerNorm's Mean and InvStdDev dtypes: as declared (inferred), else float32 (the
    stash_type=1 default; float16/bfloat16 ones read as float32 here and are narrowed after)."""
    out: list[np.dtype[Any]] = []
    for j in (1, 2):
        info = kn.outputs[j] if j < len(kn.outputs) else None
        dt = info.dtype if info is not None and info.dtype is not None else None
        out.append(np.dtype(dt) if dt is not None else np.dtype(np.float32))
    return out[0], out[1]


def _ln_supports(kn: KernelNode, rt: Runtime) -> str | None:
    for what, dt in zip(("Mean", "InvStdDev"), _stat_dtypes(kn)):
        if dt not in _STATS:
            return f"LayerNormalization {what} as {dt} is not supported by the OpenCL kernel"
    return _norm_supports(kn, rt)


def _per_channel(kn: KernelNode, what: str, p: Any, c: int) -> None:
    """InvalidArgument unless the parameter `p` holds exactly one value per channel."""
    if tuple(p.shape) != (c,):
        raise InvalidArgument(f"{kn.name}: {what} has shape {tuple(p.shape)}, expected ({c},)")


def _channel_supports(kn: KernelNode, names: tuple[str, ...], min_rank: int) -> str | None:
    """Decline, when the shapes are known at session creation, an input of rank below
    `min_rank` or a parameter (inputs 1...) that is not (C,): the CPU provider then raises
    InvalidArgument or (a (C, D1, ...) BatchNormalization parameter) computes it."""
    x = kn.inputs[0]
    if x is None or x.shape is None:
        return None
    if len(x.shape) < min_rank:
        return f"{kn.op_type} on rank {len(x.shape)}: the CPU provider checks it"
    c = x.shape[1]
    for i, what in enumerate(names, start=1):
        info = kn.inputs[i] if i < len(kn.inputs) else None
        if info is None or info.shape is None:
            continue
        if len(info.shape) != 1 or (
            isinstance(c, int) and isinstance(info.shape[0], int) and info.shape[0] != c
        ):
            return (
                f"{kn.op_type}: {what} of shape {tuple(info.shape)} is not one value per "
                f"channel ({c}): the CPU provider checks it"
            )
    return None


@ocl_kernel("RMSNormalization", 23, dtypes=FLOATS, supports=_norm_supports)
def rms_norm(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    (k,) = rt.build(_src(dt), "rmsnorm")
    axis_attr = int(kn.attr("axis", -1))
    eps = dt.type(kn.attr("epsilon", 1e-5))

    def run(x: Any, scale: Any) -> tuple[Any]:
        shape = tuple(x.shape)
        axis = shape_sem.norm_axis(kn, axis_attr, len(shape), scalar=True)
        tail = shape[axis:]
        s0, s1, split = _row_index(kn, "scale", tuple(scale.shape), tail)
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


@ocl_kernel("LayerNormalization", 17, dtypes=FLOATS, supports=_ln_supports)
def layer_norm(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    mdt, vdt = _stat_dtypes(kn)
    k, _ = _program(rt, dt, (mdt, vdt))
    axis_attr = int(kn.attr("axis", -1))
    eps = dt.type(kn.attr("epsilon", 1e-5))
    outs = kn.node.outputs
    want = len(outs) > 1 and any(outs[1:])

    def run(x: Any, scale: Any, bias: Any = None) -> tuple[Any, ...]:
        shape = tuple(x.shape)
        axis = shape_sem.norm_axis(kn, axis_attr, len(shape), scalar=True)
        tail = shape[axis:]
        length = math.prod(tail)
        rows = math.prod(shape[:axis])
        s0, s1, split = _row_index(kn, "scale", tuple(scale.shape), tail)
        b0, b1, bsplit = (
            _row_index(kn, "bias", tuple(bias.shape), tail) if bias is not None else (0, 0, 1)
        )
        y = rt.empty(shape, dt)
        stat_shape = shape[:axis] + (1,) * len(tail)
        mean = rt.empty(stat_shape, mdt)
        inv = rt.empty(stat_shape, vdt)
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
            np.int64(b0),
            np.int64(b1),
            np.int64(bsplit),
            np.int64(0),
        )
        return (y, mean, inv)[: len(outs)]

    return run


def _bn_supports(kn: KernelNode, rt: Runtime) -> str | None:
    if kn.attr("training_mode", 0) or len([o for o in kn.node.outputs if o]) > 1:
        return "BatchNormalization in training mode (running statistics) is not implemented"
    if kn.since_version < 9 and kn.attr("spatial", 1) == 0:
        return "BatchNormalization with spatial=0 is not implemented"
    return _channel_supports(kn, ("scale", "B", "mean", "var"), 2)


@ocl_kernel("BatchNormalization", 1, dtypes=FLOATS, supports=_bn_supports)
def batch_norm(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    _, k = _program(rt, dt)
    eps = dt.type(kn.attr("epsilon", 1e-5))

    def run(x: Any, s: Any, b: Any, mean: Any, var: Any) -> tuple[Any, ...]:
        shape = tuple(x.shape)
        if len(shape) < 2:
            raise InvalidArgument(f"{kn.name}: input must be at least 2-D, got {shape}")
        c = shape[1]
        for what, p in (("scale", s), ("B", b), ("mean", mean), ("var", var)):
            _per_channel(kn, what, p, c)
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


def _in_supports(kn: KernelNode, rt: Runtime) -> str | None:
    return _channel_supports(kn, ("scale", "B"), 3)


@ocl_kernel("InstanceNormalization", 6, dtypes=FLOATS, supports=_in_supports)
def instance_norm(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    k, _ = _program(rt, dt)
    eps = dt.type(kn.attr("epsilon", 1e-5))

    def run(x: Any, s: Any, b: Any) -> tuple[Any]:
        shape = tuple(x.shape)
        if len(shape) < 3:
            raise InvalidArgument(f"{kn.name}: input must be at least 3-D, got {shape}")
        n, c = shape[0], shape[1]
        _per_channel(kn, "scale", s, c)
        _per_channel(kn, "B", b, c)
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
            np.int64(0),
            np.int64(0),
            np.int64(1),
            np.int64(c),
        )
        return (y,)

    return run


_ = lit
