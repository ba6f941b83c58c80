"""Resize (opset 10+) and Upsample: separable tap tables on the host, one gather-and-weight
kernel on the device.

Resize is separable: for every axis the host computes, per output coordinate, the source
indices and weights of its taps (nearest: 1, linear: 2, cubic: 4, antialias: wider; an axis
left alone: 1 tap of weight 1) with `turnout.sdk.semantics.resize`, as every provider does, plus an
"outside" flag for tf_crop_and_resize extrapolation. The tables are small (sum of the output
dims) and cached by shape and parameters; one work item per output element sums the product
of its axes' taps. Integer data is computed in double and rounded, nearest mode copies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import attr_text
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.resize import (
    extrapolation_fill,
    filter_taps,
    nearest_indices,
    outside_roi,
    resize_attr_error,
    resize_targets,
    source_coordinates,
)

from ..runtime import CTYPES, Runtime, buf, c_strides, lit
from .base import NUM, ocl_kernel

__all__: list[str] = []

_MAX_RANK = 8
_SRC = """
__kernel void resize(long n, int rank, __global const long* m, __global {T}* out,
                     __global const {T}* x, __global const long* tidx,
                     __global const {A}* tw, __global const uchar* outside) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long c[{R}];
  long r = gid;
  for (int d = rank - 1; d >= 0; --d) {{ c[d] = r % m[d]; r /= m[d]; }}
  for (int d = 0; d < rank; ++d)
    if (outside[m[3 * rank + d] + c[d]]) {{ out[gid] = EXTRAP; return; }}
  long total = 1;
  for (int d = 0; d < rank; ++d) total *= m[2 * rank + d];
  {A} acc = 0;
  for (long t = 0; t < total; ++t) {{
    long q = t, off = 0; {A} w = 1;
    for (int d = rank - 1; d >= 0; --d) {{
      long K = m[2 * rank + d]; long k = q % K; q /= K;
      long e = m[4 * rank + d] + c[d] * K + k;
      off += tidx[e] * m[rank + d];
      w *= tw[e];
    }}
#if NEAREST
    out[gid] = x[off]; return;
#else
    acc += w * ({A})x[off];
#endif
  }}
  out[gid] = FINISH(acc);
}}
"""


class _Tables:
    """Per-axis tap tables for one (shape, scales/sizes, roi), uploaded once and cached."""

    def __init__(self, kn: KernelNode, mode: str, coord: str, nearest: str) -> None:
        self.name = kn.name
        self.mode, self.coord, self.nearest = mode, coord, nearest
        self.cubic_a = float(kn.attr("cubic_coeff_a", -0.75))
        self.exclude_outside = bool(kn.attr("exclude_outside", 0))
        self.antialias = bool(kn.attr("antialias", 0))
        self.policy = attr_text(kn.attr("keep_aspect_ratio_policy"), "stretch")
        axes = kn.attr("axes")
        self.axes = None if axes is None else [int(a) for a in axes]
        self.cache: dict[Any, Any] = {}

    def plan(
        self, shape: tuple[int, ...], roi: Any, scales: Any, sizes: Any
    ) -> tuple[tuple[int, ...], list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
        """Output shape and, per axis, (indices (out, K), weights (out, K), outside (out,))."""
        rank = len(shape)
        axes, sc, sz, rois = resize_targets(
            self.name, self.axes, self.policy, self.coord, shape, roi, scales, sizes
        )
        per_axis = {a: (s, o, rr) for a, s, o, rr in zip(axes, sc, sz, rois)}
        out_shape = list(shape)
        tables = []
        for a in range(rank):
            n_in = shape[a]
            if a not in per_axis:
                tables.append(_identity(n_in))
                continue
            s, o, rr = per_axis[a]
            out_shape[a] = o
            if n_in == o and s == 1.0 and rr is None:
                tables.append(_identity(n_in))
                continue
            tables.append(self._axis(n_in, s, o, rr))
        return tuple(out_shape), tables

    def _axis(
        self, n: int, scale: float, out_len: int, roi: tuple[float, float] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = source_coordinates(self.coord, out_len, n, scale, roi)
        outside = outside_roi(src, n) if roi is not None else np.zeros(out_len, bool)
        if self.mode == "nearest":
            idx = nearest_indices(src, self.nearest, scale, n)
            return idx[:, None], np.ones((out_len, 1)), outside
        idx, w = filter_taps(
            src, n, self.mode, scale, self.cubic_a, self.antialias, self.exclude_outside
        )
        return idx, w, outside


def _identity(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.arange(n, dtype=np.int64)[:, None], np.ones((n, 1)), np.zeros(n, bool)


_Apply = Callable[[Any, Any, Any, Any], tuple[Any]]  # (x, roi, scales, sizes) -> (y,)


def _int_lit(v: int, ctype: str) -> str:
    """An exact C literal of the integer `v` (INT64_MIN and values above LONG_MAX included)."""
    if v < 0:
        return f"(({ctype})(-{-v - 1}L - 1))"
    return f"(({ctype}){v}UL)"


def _build(kn: KernelNode, rt: Runtime, tables: _Tables) -> _Apply:
    dt = np.dtype(kn.inputs[0].dtype)
    T = CTYPES[dt]
    A = "double" if (dt == np.float64 or (dt.kind in "iu" and rt.fp64)) else "float"
    adt = np.float64 if A == "double" else np.float32
    if dt.kind in "iu":
        info = np.iinfo(dt)
        finish = f"(({T})clamp(rint(v), ({A}){info.min}, ({A}){info.max}))"
    else:
        finish = f"(({T})(v))"
    fill = extrapolation_fill(float(kn.attr("extrapolation_value", 0.0)), dt)
    extrap = lit(fill, T) if dt.kind == "f" else _int_lit(int(fill), T)
    src = (
        f"#define NEAREST {int(tables.mode == 'nearest')}\n#define EXTRAP {extrap}\n"
        f"#define FINISH(v) {finish}\n" + _SRC.format(T=T, A=A, R=_MAX_RANK)
    )
    (k,) = rt.build(src, "resize")

    def apply(x: Any, roi: Any, scales: Any, sizes: Any) -> tuple[Any]:
        shape = tuple(x.shape)
        if not 0 < len(shape) <= _MAX_RANK:  # above: declined when known at session creation
            raise InvalidArgument(f"{kn.name}: rank {len(shape)} is not supported")
        key = (
            shape,
            None if roi is None else np.asarray(roi).tobytes(),
            None if scales is None else np.asarray(scales).tobytes(),
            None if sizes is None else np.asarray(sizes).tobytes(),
        )
        entry = tables.cache.get(key)
        if entry is None:
            out_shape, tabs = tables.plan(shape, roi, scales, sizes)
            offs, o = [], 0
            for idx, _, _ in tabs:
                offs.append(o)
                o += idx.size
            ti = np.concatenate([t[0].reshape(-1) for t in tabs]).astype(np.int64)
            tw = np.concatenate([t[1].reshape(-1) for t in tabs]).astype(adt)
            flags = np.concatenate([t[2].reshape(-1) for t in tabs] + [np.zeros(1)]).astype(
                np.uint8
            )
            foffs = list(np.cumsum([0] + [len(t[2]) for t in tabs[:-1]]))
            ks = [t[0].shape[1] for t in tabs]
            meta = (*out_shape, *c_strides(shape), *ks, *foffs, *offs)
            entry = (
                out_shape,
                rt.upload(ti),
                rt.upload(tw),
                rt.upload(flags),
                rt.meta(tuple(int(v) for v in meta)),
            )
            if len(tables.cache) > 64:
                tables.cache.clear()
            tables.cache[key] = entry
        out_shape, ti_d, tw_d, fl_d, meta_d = entry
        out = rt.empty(out_shape, dt)
        if out.size:
            if x.size == 0:
                raise InvalidArgument(f"{kn.name}: cannot resize an empty tensor to {out_shape}")
            rt.launch(
                k,
                out.size,
                np.int32(len(shape)),
                meta_d,
                buf(out),
                buf(x),
                buf(ti_d),
                buf(tw_d),
                buf(fl_d),
            )
        return (out,)

    return apply


def _supports(kn: KernelNode, rt: Runtime) -> str | None:
    x = kn.inputs[0]
    if x is not None and x.shape is not None and len(x.shape) > _MAX_RANK:
        return f"{kn.op_type}: the OpenCL kernel takes rank <= {_MAX_RANK}, not {len(x.shape)}"
    mode = attr_text(kn.attr("mode"), "nearest")
    if kn.op_type == "Upsample" and mode == "bilinear":
        mode = "linear"
    coord, nearest = "asymmetric", "simple"  # Upsample's and Resize-10's
    if kn.since_version >= 11 and kn.op_type == "Resize":
        coord = attr_text(kn.attr("coordinate_transformation_mode"), "half_pixel")
        nearest = attr_text(kn.attr("nearest_mode"), "round_prefer_floor")
    policy = attr_text(kn.attr("keep_aspect_ratio_policy"), "stretch")
    return resize_attr_error(mode, coord, nearest, policy)


@ocl_kernel("Resize", 10, until=10, dtypes=NUM, supports=_supports, host_inputs=(1,))
def resize10(kn: KernelNode, rt: Runtime) -> KernelFn:
    apply = _build(
        kn, rt, _Tables(kn, attr_text(kn.attr("mode"), "nearest"), "asymmetric", "simple")
    )
    return lambda x, scales: apply(x, None, scales, None)


@ocl_kernel("Resize", 11, dtypes=NUM, supports=_supports, host_inputs=(1, 2, 3))
def resize(kn: KernelNode, rt: Runtime) -> KernelFn:
    tables = _Tables(
        kn,
        attr_text(kn.attr("mode"), "nearest"),
        attr_text(kn.attr("coordinate_transformation_mode"), "half_pixel"),
        attr_text(kn.attr("nearest_mode"), "round_prefer_floor"),
    )
    apply = _build(kn, rt, tables)

    def run(x: Any, roi: Any = None, scales: Any = None, sizes: Any = None) -> tuple[Any]:
        return apply(x, roi, scales, sizes)

    return run


@ocl_kernel("Upsample", 7, dtypes=NUM, supports=_supports, host_inputs=(1,))
def upsample(kn: KernelNode, rt: Runtime) -> KernelFn:
    mode = attr_text(kn.attr("mode"), "nearest")
    apply = _build(
        kn, rt, _Tables(kn, "linear" if mode == "bilinear" else mode, "asymmetric", "simple")
    )
    scales_attr = kn.attr("scales")

    def run(x: Any, scales: Any = None) -> tuple[Any]:
        s = np.asarray(scales if scales is not None else scales_attr, np.float32)
        if s.size != len(x.shape) or (s < 1).any():
            raise InvalidArgument(f"{kn.name}: Upsample scales {s.tolist()} do not fit {x.shape}")
        return apply(x, None, s, None)

    return run
