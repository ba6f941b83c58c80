"""Convolution (direct) and pooling (Max/Average/Global), for 1, 2 and 3 spatial dims.

Every op is lifted to 3 spatial dims (leading size-1 dims) so one kernel per op serves all
ranks. One work item computes one output element. Output sizes and pads (auto_pad, ceil_mode)
are computed on the host from the runtime shape; the parameters travel in one `long` buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.geometry import (
    check_conv_channels,
    conv_geometry,
    conv_kernel_shape,
    pool_kernel_shape,
    spatial_attrs,
)

from ..runtime import CTYPES, Runtime, buf
from .base import FLOATS, ocl_kernel

__all__: list[str] = []

# meta: N C D H W | OC OD OH OW | KD KH KW | SD SH SW | PD PH PW | DD DH DW | G
_CONV_SRC = """
__kernel void conv(long n, __global const long* m, __global {T}* out, __global const {T}* x,
                   __global const {T}* w, __global const {T}* b, int hasb) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long C = m[1], D = m[2], H = m[3], W = m[4], OC = m[5], OD = m[6], OH = m[7], OW = m[8];
  long KD = m[9], KH = m[10], KW = m[11], G = m[21];
  long r = gid;
  long ow = r % OW; r /= OW; long oh = r % OH; r /= OH; long od = r % OD; r /= OD;
  long oc = r % OC; long nb = r / OC;
  long cg = C / G, g = oc / (OC / G);
  {T} acc = hasb ? b[oc] : ({T})0;
  for (long ic = 0; ic < cg; ++ic) {{
    long c = g * cg + ic;
    for (long kd = 0; kd < KD; ++kd) {{
      long id = od * m[12] - m[15] + kd * m[18];
      if (id < 0 || id >= D) continue;
      for (long kh = 0; kh < KH; ++kh) {{
        long ih = oh * m[13] - m[16] + kh * m[19];
        if (ih < 0 || ih >= H) continue;
        for (long kw = 0; kw < KW; ++kw) {{
          long iw = ow * m[14] - m[17] + kw * m[20];
          if (iw < 0 || iw >= W) continue;
          acc += x[(((nb * C + c) * D + id) * H + ih) * W + iw] *
                 w[(((oc * cg + ic) * KD + kd) * KH + kh) * KW + kw];
        }}
      }}
    }}
  }}
  out[gid] = acc;
}}

// MODE 0 max, 1 average (count_include_pad in m[21]), m[22..24] pad ends
__kernel void pool(long n, __global const long* m, __global {T}* out, __global long* idx,
                   __global const {T}* x, int want_idx, int col_major) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long C = m[1], D = m[2], H = m[3], W = m[4], OD = m[6], OH = m[7], OW = m[8];
  long KD = m[9], KH = m[10], KW = m[11];
  long r = gid;
  long ow = r % OW; r /= OW; long oh = r % OH; r /= OH; long od = r % OD; r /= OD;
  long nc = r;
  {T} acc = MODE == 0 ? -INFINITY : ({T})0;
  long best = -1, cnt = 0, cnt_pad = 0;
  for (long kd = 0; kd < KD; ++kd) {{
    long id = od * m[12] - m[15] + kd * m[18];
    for (long kh = 0; kh < KH; ++kh) {{
      long ih = oh * m[13] - m[16] + kh * m[19];
      for (long kw = 0; kw < KW; ++kw) {{
        long iw = ow * m[14] - m[17] + kw * m[20];
        if (id >= -m[15] && id < D + m[22] && ih >= -m[16] && ih < H + m[23] &&
            iw >= -m[17] && iw < W + m[24]) cnt_pad++;
        if (id < 0 || id >= D || ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
        long off = ((nc * D + id) * H + ih) * W + iw;
        {T} v = x[off];
        cnt++;
        if (MODE == 0) {{
          if (v > acc || best < 0) {{
            acc = v;
            best = col_major ? ((nc * W + iw) * H + ih) * D + id : off;
          }}
        }} else acc += v;
      }}
    }}
  }}
  if (MODE == 1) acc = acc / ({T})(m[21] ? cnt_pad : cnt);
  out[gid] = acc;
  if (want_idx) idx[gid] = best;
}}
"""


def _spatial(
    kn: KernelNode, x_shape: tuple[int, ...], kernel: list[int], ceil: bool
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(out sizes, strides, pads begin, pads end, dilations) for the spatial dims.

    `turnout.sdk.semantics.geometry`, as on every provider: the same pads for every auto_pad, and
    the same InvalidArgument for an unknown one or a window that does not fit.
    """
    strides, dil = spatial_attrs(kn, len(x_shape) - 2, kernel)
    pb, pe, out = conv_geometry(kn, x_shape[2:], kernel, strides, dil, ceil)
    return out, strides, pb, pe, dil


def _lift(vals: list[int], fill: int) -> list[int]:
    return [fill] * (3 - len(vals)) + vals


def _rank_supports(kn: KernelNode, rt: Runtime) -> str | None:
    """Decline more than 3 spatial dims when the input rank is known at session creation (the
    kernel lifts everything to 3); a rank below 3 is an error the run reports, as on CPU."""
    x = kn.inputs[0]
    if x is not None and x.shape is not None and len(x.shape) > 5:
        return f"{kn.op_type}: the OpenCL kernel handles 1-3 spatial dims, not {len(x.shape) - 2}"
    return None


@ocl_kernel("Conv", 1, dtypes=FLOATS, supports=_rank_supports)
def conv(kn: KernelNode, rt: Runtime) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    (k, _) = rt.build("#define MODE 0\n" + _CONV_SRC.format(T=CTYPES[dt]), "conv", "pool")
    group = int(kn.attr("group", 1))

    def run(x: Any, w: Any, b: Any = None) -> tuple[Any]:
        xs, ws = tuple(x.shape), tuple(w.shape)
        kern = conv_kernel_shape(kn, xs, ws)
        if len(xs) > 5:  # declined at session creation when the rank is known then
            raise InvalidArgument(f"{kn.name}: the OpenCL Conv handles 1-3 spatial dims, X is {xs}")
        check_conv_channels(kn.name, xs, ws, group)
        if b is not None and tuple(b.shape) != (ws[0],):
            raise InvalidArgument(f"{kn.name}: bias shape {tuple(b.shape)} must be ({ws[0]},)")
        o, st, pb, _pe, dil = _spatial(kn, xs, kern, False)
        out = rt.empty((xs[0], ws[0], *o), dt)
        meta = (
            xs[0],
            xs[1],
            *_lift(list(xs[2:]), 1),
            ws[0],
            *_lift(o, 1),
            *_lift(kern, 1),
            *_lift(st, 1),
            *_lift(pb, 0),
            *_lift(dil, 1),
            group,
        )
        rt.launch(
            k,
            out.size,
            rt.meta(tuple(int(v) for v in meta)),
            buf(out),
            buf(x),
            buf(w),
            buf(b) if b is not None else buf(out),
            np.int32(b is not None),
        )
        return (out,)

    return run


def _pool(kn: KernelNode, rt: Runtime, mode: int, is_global: bool) -> KernelFn:
    dt = np.dtype(kn.inputs[0].dtype)
    (_, k) = rt.build(f"#define MODE {mode}\n" + _CONV_SRC.format(T=CTYPES[dt]), "conv", "pool")
    ceil = bool(kn.attr("ceil_mode", 0))
    include_pad = int(kn.attr("count_include_pad", 0))
    want_idx = len(kn.node.outputs) > 1 and bool(kn.node.outputs[1])
    col_major = int(kn.attr("storage_order", 0))

    def run(x: Any) -> tuple[Any, ...]:
        xs = tuple(x.shape)
        if len(xs) < 3:
            raise InvalidArgument(f"{kn.name}: pooling input {xs} must be N-D with N >= 3")
        if len(xs) > 5:  # declined at session creation when the rank is known then
            raise InvalidArgument(f"{kn.name}: OpenCL pooling handles 1-3 spatial dims, X is {xs}")
        if is_global:
            kern = list(xs[2:])
            o, st, pb, pe, dil = (
                [1] * len(kern),
                [1] * len(kern),
                [0] * len(kern),
                [0] * len(kern),
                [1] * len(kern),
            )
        else:
            kern = pool_kernel_shape(kn, len(xs) - 2)
            o, st, pb, pe, dil = _spatial(kn, xs, kern, ceil)
        out = rt.empty((xs[0], xs[1], *o), dt)
        idx = rt.empty(tuple(out.shape), np.int64) if want_idx else None
        meta = (
            xs[0],
            xs[1],
            *_lift(list(xs[2:]), 1),
            xs[1],
            *_lift(o, 1),
            *_lift(kern, 1),
            *_lift(st, 1),
            *_lift(pb, 0),
            *_lift(dil, 1),
            include_pad,
            *_lift(pe, 0),
        )
        rt.launch(
            k,
            out.size,
            rt.meta(tuple(int(v) for v in meta)),
            buf(out),
            buf(idx) if idx is not None else buf(out),
            buf(x),
            np.int32(want_idx),
            np.int32(col_major),
        )
        return (out, idx) if want_idx else (out,)

    return run


def _pool_builder(mode: int, is_global: bool) -> Callable[[KernelNode, Runtime], KernelFn]:
    def build(kn: KernelNode, rt: Runtime) -> KernelFn:
        return _pool(kn, rt, mode, is_global)

    return build


for _op, _mode, _global in (
    ("MaxPool", 0, False),
    ("AveragePool", 1, False),
    ("GlobalMaxPool", 0, True),
    ("GlobalAveragePool", 1, True),
):
    ocl_kernel(_op, 1, dtypes=FLOATS, supports=_rank_supports)(_pool_builder(_mode, _global))
