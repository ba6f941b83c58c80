"""MatMul (batched, broadcasting batch dims) and Gemm: one tiled kernel with local memory.

The tile edge is chosen per device and dtype: the largest power of two whose square fits the
kernel's work-group limit and whose two tiles fit local memory (at most 16). Each work group
computes one TSxTS output tile, staging TS-wide slabs of A and B in local memory. A and B are
read through (row, k) / (k, col) strides, so transposes (Gemm's transA/transB) cost nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyopencl as cl

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode

from ..runtime import CTYPES, Runtime, bcast_strides, buf, lit
from .base import NUM, ocl_kernel

__all__ = ["Gemm"]

_SRC = """
#define TS {TS}
__kernel void mm(long M, long N, long K, __global const long* bo, long sam, long sak, long sbk,
                 long sbn, __global {T}* out, __global const {T}* A, __global const {T}* B,
                 __global const {T}* C, long scm, long scn, {T} alpha, {T} beta, int hasc) {{
  int lr = get_local_id(0), lc = get_local_id(1);
  long row = get_group_id(0) * TS + lr, col = get_group_id(1) * TS + lc;
  long bt = get_global_id(2);
  long ao = bo[2 * bt], bof = bo[2 * bt + 1];
  __local {T} As[TS][TS];
  __local {T} Bs[TS][TS];
  {T} acc = 0;
  for (long t = 0; t < K; t += TS) {{
    long ka = t + lc, kb = t + lr;
    As[lr][lc] = (row < M && ka < K) ? A[ao + row * sam + ka * sak] : ({T})0;
    Bs[lr][lc] = (kb < K && col < N) ? B[bof + kb * sbk + col * sbn] : ({T})0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TS; ++k) acc += As[lr][k] * Bs[k][lc];
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
  if (row < M && col < N) {{
    {T} r = alpha * acc;
    if (hasc) r += beta * C[row * scm + col * scn];
    out[bt * M * N + row * N + col] = r;
  }}
}}
"""


class Gemm:
    """The tiled kernel for one dtype, with its device-chosen tile size."""

    def __init__(self, rt: Runtime, dt: np.dtype[Any]) -> None:
        self.rt, self.dt = rt, dt
        ts = 16
        while ts > 1 and (ts * ts > rt.max_wg or 2 * ts * ts * dt.itemsize > rt.local_mem):
            ts //= 2
        (k,) = rt.build(_SRC.format(TS=ts, T=CTYPES[dt]), "mm")
        kmax = k.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, rt.cl_device)
        while ts > 1 and ts * ts > kmax:
            ts //= 2
            (k,) = rt.build(_SRC.format(TS=ts, T=CTYPES[dt]), "mm")
        self.ts, self.kernel = ts, k

    def __call__(
        self,
        out: Any,
        a: Any,
        b: Any,
        m: int,
        n: int,
        k: int,
        offsets: tuple[int, ...],
        sa: tuple[int, int],
        sb: tuple[int, int],
        c: Any = None,
        sc: tuple[int, int] = (0, 0),
        alpha: float = 1.0,
        beta: float = 0.0,
    ) -> None:
        batch = len(offsets) // 2
        if m * n * batch == 0:
            return
        ts = self.ts
        gs = (-(-m // ts) * ts, -(-n // ts) * ts, batch)
        t = self.dt.type
        self.kernel(
            self.rt.queue,
            gs,
            (ts, ts, 1),
            np.int64(m),
            np.int64(n),
            np.int64(k),
            self.rt.meta(offsets),
            np.int64(sa[0]),
            np.int64(sa[1]),
            np.int64(sb[0]),
            np.int64(sb[1]),
            buf(out),
            buf(a) if a.size else buf(out),
            buf(b) if b.size else buf(out),
            buf(c) if c is not None else buf(out),
            np.int64(sc[0]),
            np.int64(sc[1]),
            t(alpha),
            t(beta),
            np.int32(c is not None),
        )


def gemm_for(rt: Runtime, dt: np.dtype[Any]) -> Gemm:
    cache = rt.__dict__.setdefault("_gemms", {})
    if dt not in cache:
        cache[dt] = Gemm(rt, np.dtype(dt))
    return cache[dt]  # type: ignore[no-any-return]


@ocl_kernel("MatMul", 1, dtypes=NUM)
def matmul(kn: KernelNode, rt: Runtime) -> KernelFn:
    g = gemm_for(rt, np.dtype(kn.inputs[0].dtype))

    def run(a: Any, b: Any) -> tuple[Any]:
        sa, sb = tuple(a.shape), tuple(b.shape)
        if not sa or not sb:
            raise InvalidArgument(f"{kn.name}: MatMul inputs must be at least 1-D")
        a2 = (1, *sa) if len(sa) == 1 else sa
        b2 = (*sb, 1) if len(sb) == 1 else sb
        m, k = a2[-2], a2[-1]
        k2, n = b2[-2], b2[-1]
        if k != k2:
            raise InvalidArgument(f"{kn.name}: shapes {sa} and {sb} do not match for MatMul")
        try:
            batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        except ValueError:
            raise InvalidArgument(f"{kn.name}: batch dims of {sa} and {sb} differ") from None
        nb = math.prod(batch)
        ia = np.arange(math.prod(a2[:-2]), dtype=np.int64).reshape(a2[:-2]) * (m * k)
        ib = np.arange(math.prod(b2[:-2]), dtype=np.int64).reshape(b2[:-2]) * (k * n)
        offs = np.stack(
            [np.broadcast_to(ia, batch).reshape(-1), np.broadcast_to(ib, batch).reshape(-1)], 1
        ).reshape(-1)
        shape = batch + ((m,) if len(sa) > 1 else ()) + ((n,) if len(sb) > 1 else ())
        out = rt.empty(shape, a.dtype)
        if out.size and k == 0:
            from .shape import _FILL_SRC  # an empty inner dim: zeros

            (f,) = rt.build(_FILL_SRC.format(T=CTYPES[np.dtype(a.dtype)]), "fill")
            rt.launch(f, out.size, buf(out), np.dtype(a.dtype).type(0))
            return (out,)
        g(out, a, b, m, n, k, tuple(int(v) for v in offs) if nb else (), (k, 1), (n, 1))
        return (out,)

    return run


@ocl_kernel("Gemm", 1, dtypes=NUM)
def gemm(kn: KernelNode, rt: Runtime) -> KernelFn:
    g = gemm_for(rt, np.dtype(kn.inputs[0].dtype))
    ta, tb = int(kn.attr("transA", 0)), int(kn.attr("transB", 0))
    alpha, beta = float(kn.attr("alpha", 1.0)), float(kn.attr("beta", 1.0))

    def run(a: Any, b: Any, c: Any = None) -> tuple[Any]:
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise InvalidArgument(f"{kn.name}: Gemm takes 2-D A and B, got {a.shape}, {b.shape}")
        m, k = (a.shape[1], a.shape[0]) if ta else tuple(a.shape)
        k2, n = (b.shape[1], b.shape[0]) if tb else tuple(b.shape)
        if k != k2:
            raise InvalidArgument(f"{kn.name}: shapes {a.shape} and {b.shape} do not match")
        sa = (1, m) if ta else (k, 1)
        sb = (1, k) if tb else (n, 1)
        sc = (0, 0)
        if c is not None:
            try:
                np.broadcast_shapes(tuple(c.shape), (m, n))
            except ValueError:
                raise InvalidArgument(
                    f"{kn.name}: C {c.shape} does not broadcast to {(m, n)}"
                ) from None
            sc = bcast_strides(tuple(c.shape), (m, n))  # type: ignore[assignment]
            if c.size == 0:
                c = None
        out = rt.empty((m, n), a.dtype)
        g(out, a, b, m, n, k, (0, 0), sa, sb, c, sc, alpha, beta)
        return (out,)

    return run


_ = lit
