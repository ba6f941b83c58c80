"""Data movement: Transpose, Concat, Split, Slice, Expand, Tile, Pad, Gather, GatherElements,
DepthToSpace, SpaceToDepth.

Most are one strided copy (`dst[doff + idx.ds] = src[soff + idx.ss]` over a shape), a kernel
per element size that moves bits, so one program serves every dtype. Shape-like inputs
(Slice's starts, Expand's shape, ...) are declared host inputs and never leave host memory.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import shape as shape_sem

from ..runtime import CTYPES, HALFS, STORE, Runtime, bcast_strides, buf, c_strides
from .base import ALL, host_ints, ocl_kernel

__all__ = ["Copier", "copier"]

_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}

_COPY_SRC = """
__kernel void copy_{T}(long n, int rank, __global const long* m, __global {T}* dst, long doff,
                       __global const {T}* src, long soff) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long r = gid, di = doff, si = soff;
  for (int d = rank - 1; d >= 0; --d) {{
    long dim = m[d]; long c = r % dim; r /= dim;
    di += c * m[rank + d]; si += c * m[2 * rank + d];
  }}
  dst[di] = src[si];
}}
"""


class Copier:
    """Strided copies for one element size."""

    def __init__(self, rt: Runtime, itemsize: int) -> None:
        self.rt = rt
        t = _BITS[itemsize]
        (self.kernel,) = rt.build(_COPY_SRC.format(T=t), f"copy_{t}")

    def __call__(
        self,
        dst: Any,
        doff: int,
        dstrides: tuple[int, ...],
        src: Any,
        soff: int,
        sstrides: tuple[int, ...],
        shape: tuple[int, ...],
    ) -> None:
        n = math.prod(shape)
        if n == 0:
            return
        dims, ds, ss = _collapse(shape, dstrides, sstrides)
        meta = self.rt.meta(tuple(dims) + tuple(ds) + tuple(ss))
        self.rt.launch(
            self.kernel,
            n,
            np.int32(len(dims)),
            meta,
            buf(dst),
            np.int64(doff),
            buf(src),
            np.int64(soff),
        )


def _collapse(
    shape: tuple[int, ...], ds: tuple[int, ...], ss: tuple[int, ...]
) -> tuple[list[int], list[int], list[int]]:
    """Drop size-1 dims and merge dims that are contiguous in both source and destination."""
    dims = [(s, a, b) for s, a, b in zip(shape, ds, ss) if s != 1]
    out: list[list[int]] = []
    for s, a, b in dims:
        if out and out[-1][1] == a * s and out[-1][2] == b * s:
            out[-1][0] *= s
            out[-1][1], out[-1][2] = a, b
        else:
            out.append([s, a, b])
    return [d[0] for d in out], [d[1] for d in out], [d[2] for d in out]


def copier(rt: Runtime, dtype: Any) -> Copier:
    cache = rt.__dict__.setdefault("_copiers", {})
    size = np.dtype(dtype).itemsize
    if size not in cache:
        cache[size] = Copier(rt, size)
    return cache[size]  # type: ignore[no-any-return]


def _dt(kn: KernelNode, i: int = 0) -> Any:
    info = kn.inputs[i]
    assert info is not None
    return info.dtype


# ---------------------------------------------------------------------------- Transpose
@ocl_kernel("Transpose", 1, dtypes=ALL, half="bits")
def transpose(kn: KernelNode, rt: Runtime) -> KernelFn:
    cp = copier(rt, _dt(kn))
    perm_attr = kn.attr("perm")

    def run(x: Any) -> tuple[Any]:
        r = len(x.shape)
        perm = list(perm_attr) if perm_attr is not None else list(range(r))[::-1]
        if sorted(perm) != list(range(r)):
            raise InvalidArgument(f"{kn.name}: perm {perm} is not a permutation of rank {r}")
        shape = tuple(x.shape[p] for p in perm)
        st = c_strides(tuple(x.shape))
        out = rt.empty(shape, x.dtype)
        cp(out, 0, c_strides(shape), x, 0, tuple(st[p] for p in perm), shape)
        return (out,)

    return run


# ---------------------------------------------------------------------------- Concat / Split
@ocl_kernel("Concat", 1, dtypes=ALL, half="bits")
def concat(kn: KernelNode, rt: Runtime) -> KernelFn:
    cp = copier(rt, _dt(kn))
    axis_attr = int(kn.attr("axis", 1 if kn.since_version < 4 else 0))

    def run(*xs: Any) -> tuple[Any]:
        r = len(xs[0].shape)
        axis = shape_sem.norm_axis(kn, axis_attr, r)
        for x in xs:
            if len(x.shape) != r or any(
                x.shape[d] != xs[0].shape[d] for d in range(r) if d != axis
            ):
                raise InvalidArgument(
                    f"{kn.name}: shapes {[x.shape for x in xs]} cannot be "
                    f"concatenated on axis {axis}"
                )
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        out = rt.empty(tuple(shape), xs[0].dtype)
        ost = c_strides(tuple(shape))
        off = 0
        for x in xs:
            cp(out, off * ost[axis], ost, x, 0, c_strides(tuple(x.shape)), tuple(x.shape))
            off += x.shape[axis]
        return (out,)

    return run


def _split(kn: KernelNode, rt: Runtime, from_input: bool) -> KernelFn:
    cp = copier(rt, _dt(kn))
    axis_attr = int(kn.attr("axis", 0))
    n_out = len(kn.node.outputs)
    num_outputs = kn.attr("num_outputs")

    def run(x: Any, split: Any = None) -> tuple[Any, ...]:
        axis = shape_sem.norm_axis(kn, axis_attr, len(x.shape))
        asked = shape_sem.split_request(kn, split if from_input else None)
        sizes = shape_sem.split_sizes(kn, x.shape[axis], asked, n_out, num_outputs)
        st = c_strides(tuple(x.shape))
        outs = []
        off = 0
        for s in sizes:
            shape = list(x.shape)
            shape[axis] = s
            o = rt.empty(tuple(shape), x.dtype)
            cp(o, 0, c_strides(tuple(shape)), x, off * st[axis], st, tuple(shape))
            outs.append(o)
            off += s
        return tuple(outs)

    return run


@ocl_kernel("Split", 1, until=12, dtypes=ALL, half="bits")
def split_attr(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _split(kn, rt, from_input=False)


@ocl_kernel("Split", 13, dtypes=ALL, half="bits", host_inputs=(1,))
def split_input(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _split(kn, rt, from_input=True)


# ---------------------------------------------------------------------------- Slice
def _slice_params(
    kn: KernelNode,
    shape: tuple[int, ...],
    starts: list[int],
    ends: list[int],
    axes: list[int] | None,
    steps: list[int] | None,
) -> tuple[list[int], list[int], list[int]]:
    """Per axis: the first index, the element count and the step (`shape.slice_index`)."""
    ranges = [
        range(*sl.indices(d))
        for sl, d in zip(shape_sem.slice_index(kn, shape, starts, ends, axes, steps), shape)
    ]
    return [r.start for r in ranges], [len(r) for r in ranges], [r.step for r in ranges]


def _slice(kn: KernelNode, rt: Runtime, attrs: bool) -> KernelFn:
    cp = copier(rt, _dt(kn))

    def run(
        x: Any, starts: Any = None, ends: Any = None, axes: Any = None, steps: Any = None
    ) -> tuple[Any]:
        shape = tuple(x.shape)
        if attrs:
            st_, en_ = kn.attr("starts"), kn.attr("ends")
            ax_ = kn.attr("axes")
            sp_ = None
        else:
            st_, en_ = host_ints(starts), host_ints(ends)
            ax_ = host_ints(axes) if axes is not None else None
            sp_ = host_ints(steps) if steps is not None else None
        begin, size, step = _slice_params(kn, shape, st_, en_, ax_, sp_)
        xs = c_strides(shape)
        out = rt.empty(tuple(size), x.dtype)
        soff = sum(b * s for b, s in zip(begin, xs))
        cp(
            out,
            0,
            c_strides(tuple(size)),
            x,
            soff,
            tuple(s * k for s, k in zip(xs, step)),
            tuple(size),
        )
        return (out,)

    return run


@ocl_kernel("Slice", 1, until=9, dtypes=ALL, half="bits")
def slice_attr(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _slice(kn, rt, True)


@ocl_kernel("Slice", 10, dtypes=ALL, half="bits", host_inputs=(1, 2, 3, 4))
def slice_input(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _slice(kn, rt, False)


# ---------------------------------------------------------------------------- Expand / Tile
@ocl_kernel("Expand", 8, dtypes=ALL, half="bits", host_inputs=(1,))
def expand(kn: KernelNode, rt: Runtime) -> KernelFn:
    cp = copier(rt, _dt(kn))

    def run(x: Any, shape: Any) -> tuple[Any]:
        try:
            out_shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(host_ints(shape))))
        except ValueError:
            raise InvalidArgument(
                f"{kn.name}: cannot expand {x.shape} to {host_ints(shape)}"
            ) from None
        out = rt.empty(out_shape, x.dtype)
        cp(out, 0, c_strides(out_shape), x, 0, bcast_strides(tuple(x.shape), out_shape), out_shape)
        return (out,)

    return run


@ocl_kernel("Tile", 6, dtypes=ALL, half="bits", host_inputs=(1,))
def tile(kn: KernelNode, rt: Runtime) -> KernelFn:
    cp = copier(rt, _dt(kn))

    def run(x: Any, repeats: Any) -> tuple[Any]:
        reps = host_ints(repeats)
        if len(reps) != len(x.shape) or any(r < 0 for r in reps):
            raise InvalidArgument(f"{kn.name}: repeats {reps} do not fit shape {x.shape}")
        out_shape = tuple(d * r for d, r in zip(x.shape, reps))
        out = rt.empty(out_shape, x.dtype)
        xs = c_strides(tuple(x.shape))
        os_ = c_strides(out_shape)
        shape: list[int] = []
        ds: list[int] = []
        ss: list[int] = []
        for d, r, a, b in zip(x.shape, reps, xs, os_):
            shape += [r, d]
            ds += [b * d, b]
            ss += [0, a]
        cp(out, 0, tuple(ds), x, 0, tuple(ss), tuple(shape))
        return (out,)

    return run


# ---------------------------------------------------------------------------- DepthToSpace
@ocl_kernel("DepthToSpace", 1, dtypes=ALL, half="bits")
def depth_to_space(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _block_copy(kn, rt, shape_sem.depth_to_space_plan)


@ocl_kernel("SpaceToDepth", 1, dtypes=ALL, half="bits")
def space_to_depth(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _block_copy(kn, rt, shape_sem.space_to_depth_plan)


def _block_copy(kn: KernelNode, rt: Runtime, plan: Any) -> KernelFn:
    """One strided copy of the permuted view the plan describes (`shape.BlockPlan`)."""
    cp = copier(rt, _dt(kn))

    def run(x: Any) -> tuple[Any]:
        p = plan(kn, tuple(x.shape))
        st = c_strides(p.split)
        shape = tuple(p.split[i] for i in p.perm)
        out = rt.empty(p.out, x.dtype)
        cp(out, 0, c_strides(shape), x, 0, tuple(st[i] for i in p.perm), shape)
        return (out,)

    return run


# ---------------------------------------------------------------------------- Gather
_GATHER_SRC = """
__kernel void gather(long n, long inner, long axis_dim, long nidx, __global {T}* out,
                     __global const {T}* data, __global const {I}* idx, __global int* err,
                     int slot) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long in_ = gid % inner; long t = gid / inner; long j = t % nidx; long o = t / nidx;
  long k = (long)idx[j];
  if (k < 0) k += axis_dim;
  if (k < 0 || k >= axis_dim) {{ err[slot] = 1; out[gid] = 0; return; }}
  out[gid] = data[(o * axis_dim + k) * inner + in_];
}}
__kernel void gather_elements(long n, int rank, int axis, __global const long* m,
                              __global {T}* out, __global const {T}* data,
                              __global const {I}* idx, __global int* err, int slot) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long r = gid, off = 0;
  for (int d = rank - 1; d >= 0; --d) {{
    long dim = m[d]; long c = r % dim; r /= dim;
    if (d == axis) {{
      long D = m[2 * rank + d];
      c = (long)idx[gid]; if (c < 0) c += D;
      if (c < 0 || c >= D) {{ err[slot] = 1; out[gid] = 0; return; }}
    }}
    off += c * m[rank + d];
  }}
  out[gid] = data[off];
}}
"""


def _gather_kernels(rt: Runtime, kn: KernelNode) -> Any:
    t = _BITS[np.dtype(_dt(kn)).itemsize]
    it = CTYPES[np.dtype(_dt(kn, 1))]
    return rt.build(_GATHER_SRC.format(T=t, I=it), "gather", "gather_elements")


@ocl_kernel("Gather", 1, dtypes=ALL, half="bits")
def gather(kn: KernelNode, rt: Runtime) -> KernelFn:
    k, _ = _gather_kernels(rt, kn)
    axis_attr = int(kn.attr("axis", 0))
    err, slot = rt.error_slot(f"{kn.name}: Gather index out of range")

    def run(x: Any, idx: Any) -> tuple[Any]:
        r = len(x.shape)
        axis = shape_sem.norm_axis(kn, axis_attr, r)
        shape = tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1 :])
        out = rt.empty(shape, x.dtype)
        inner = math.prod(x.shape[axis + 1 :])
        n = math.prod(shape)
        if n:
            rt.launch(
                k,
                n,
                np.int64(inner),
                np.int64(x.shape[axis]),
                np.int64(max(1, math.prod(idx.shape))),
                buf(out),
                buf(x),
                buf(idx),
                err,
                np.int32(slot),
            )
        return (out,)

    return run


@ocl_kernel("GatherElements", 11, dtypes=ALL, half="bits")
def gather_elements(kn: KernelNode, rt: Runtime) -> KernelFn:
    _, k = _gather_kernels(rt, kn)
    axis_attr = int(kn.attr("axis", 0))
    err, slot = rt.error_slot(f"{kn.name}: GatherElements index out of range")

    def run(x: Any, idx: Any) -> tuple[Any]:
        r = len(x.shape)
        axis = shape_sem.norm_axis(kn, axis_attr, r)
        if len(idx.shape) != r:
            raise InvalidArgument(f"{kn.name}: indices rank {len(idx.shape)} != data rank {r}")
        shape = tuple(idx.shape)
        out = rt.empty(shape, x.dtype)
        n = math.prod(shape)
        if n:
            meta = rt.meta(shape + c_strides(tuple(x.shape)) + tuple(x.shape))
            if x.size == 0:
                raise InvalidArgument(f"{kn.name}: cannot gather from an empty axis")
            rt.launch(
                k,
                n,
                np.int32(r),
                np.int32(axis),
                meta,
                buf(out),
                buf(x),
                buf(idx),
                err,
                np.int32(slot),
            )
        return (out,)

    return run


# ---------------------------------------------------------------------------- Pad
# As the CPU provider and onnxruntime: negative pads crop first, then the positive pads are
# added around the cropped input (edge/reflect/wrap read the cropped input, not the original).
# meta: out shape | cropped dims | positive begin pads | input strides | crop starts
_PAD_SRC = """
__kernel void pad(long n, int rank, __global const long* m, __global {T}* out,
                  __global const {T}* x, {T} value) {{
  long gid = get_global_id(0);
  if (gid >= n) return;
  long r = gid, off = 0; int outside = 0;
  for (int d = rank - 1; d >= 0; --d) {{
    long dim = m[d]; long c = r % dim; r /= dim;
    long D = m[rank + d]; long k = c - m[2 * rank + d];
    if (MODE == 0) {{ if (k < 0 || k >= D) outside = 1; }}
    else if (MODE == 1) {{ k = k < 0 ? 0 : (k >= D ? D - 1 : k); }}
    else if (MODE == 2) {{
      if (D == 1) k = 0;
      else {{ long p = 2 * (D - 1); k = k % p; if (k < 0) k += p; if (k >= D) k = p - k; }}
    }} else {{ k = k % D; if (k < 0) k += D; }}
    off += (k + m[4 * rank + d]) * m[3 * rank + d];
  }}
  out[gid] = outside ? value : x[off];
}}
"""
_PAD_MODES = {"constant": 0, "edge": 1, "reflect": 2, "wrap": 3}


def _pad_plan(
    name: str, shape: tuple[int, ...], pads: list[int], mode: str
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(output shape, cropped dims, positive begin pads, crop starts) of a full-rank `pads`;
    raises InvalidArgument where the CPU provider's `pad_array` (and onnxruntime) refuses."""
    r = len(shape)
    before, after = pads[:r], pads[r:]
    starts = tuple(max(-b, 0) for b in before)
    dims = tuple(d - s - max(-e, 0) for d, s, e in zip(shape, starts, after))
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"{name}: pads {pads} crop more than the input shape {shape}")
    grow = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    if mode != "constant" and any(b or e for b, e in grow):
        if math.prod(dims) == 0:
            raise InvalidArgument(f"{name}: cannot {mode}-pad an empty tensor")
        if mode == "reflect" and any((b or e) and d < 2 for d, (b, e) in zip(dims, grow)):
            raise InvalidArgument(
                f"{name}: reflect padding needs at least 2 elements on padded axes, "
                f"shape {dims} after cropping"
            )
    out = tuple(d + b + e for d, (b, e) in zip(dims, grow))
    return out, dims, tuple(b for b, _ in grow), starts


def _pad(kn: KernelNode, rt: Runtime, attrs: bool) -> KernelFn:
    dt = np.dtype(_dt(kn))
    mode = kn.attr("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    ct = STORE[dt]
    (k,) = rt.build(f"#define MODE {_PAD_MODES[mode]}\n" + _PAD_SRC.format(T=ct), "pad")

    def run(x: Any, pads: Any = None, value: Any = None, axes: Any = None) -> tuple[Any]:
        r = len(x.shape)
        val: Any
        if attrs:
            p = list(kn.attr("pads" if kn.since_version >= 2 else "paddings"))
            val = float(kn.attr("value", 0.0))
        else:
            p = host_ints(pads)
            val = (
                np.asarray(value).reshape(-1)[0]
                if value is not None and np.asarray(value).size
                else 0
            )
        if axes is not None:
            ax = shape_sem.norm_axes(kn, host_ints(axes), r)
            if len(p) != 2 * len(ax):
                raise InvalidArgument(
                    f"{kn.name}: pads has {len(p)} entries, expected {2 * len(ax)}"
                )
            full = [0] * (2 * r)
            for i, a in enumerate(ax):
                full[a], full[a + r] = p[i], p[i + len(ax)]
            p = full
        if len(p) != 2 * r:
            raise InvalidArgument(f"{kn.name}: pads {p} do not fit rank {r}")
        shape, dims, begin, starts = _pad_plan(kn.name, tuple(x.shape), p, mode)
        out = rt.empty(shape, x.dtype)
        n = math.prod(shape)
        if n:
            meta = rt.meta(shape + dims + begin + c_strides(tuple(x.shape)) + starts)
            xb = buf(x) if x.size else buf(out)
            v = np.array(val).astype(dt)
            v = v.view(np.uint16) if dt in HALFS else v
            rt.launch(
                k,
                n,
                np.int32(r),
                meta,
                buf(out),
                xb,
                (v.astype(np.uint8) if dt == np.bool_ else v)[()],
            )
        return (out,)

    return run


@ocl_kernel("Pad", 1, until=10, dtypes=ALL, half="bits")
def pad_attr(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _pad(kn, rt, True)


@ocl_kernel("Pad", 11, dtypes=ALL, half="bits", host_inputs=(1, 2, 3))
def pad_input(kn: KernelNode, rt: Runtime) -> KernelFn:
    return _pad(kn, rt, False)
