"""LRN (opsets 1 and 13): per channel, the sum of squares over its channel window, in float64.

The input is viewed as (N, C, S) with S the flattened spatial size; the parallel loop runs over
(batch, block of S) tiles, and every loop runs over a contiguous row of the tile (vectorized).
Each window sum is summed directly rather than carried as a running sum: a running sum
(add the square entering, subtract the one leaving) cancels catastrophically once a huge value
leaves the window and carries inf - inf past an inf, and measured no faster here, as the
square roots and the division dominate. beta = 0.75 (AlexNet, GoogLeNet, ZFNet) and 0.5 take
square roots instead of a pow.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode

from ..codegen import compute_dtype, numba_array
from ..registry import BuildContext, float_inputs_applies, numba_kernel

__all__: list[str] = []


def _lrn(
    x: Any, y: Any, size: int, lo: int, scale: float, beta: float, bias: float, block: int
) -> None:  # pragma: no cover - compiled by numba
    n, ch, sp = x.shape
    hi = size - 1 - lo
    nb = (sp + block - 1) // block
    for t in prange(n * nb):
        b = t // nb
        s0 = (t % nb) * block
        m = min(block, sp - s0)
        acc = np.empty(m, np.float64)
        for c in range(ch):
            for s in range(m):
                acc[s] = 0.0
            for k in range(max(c - lo, 0), min(c + hi + 1, ch)):
                xr = x[b, k, s0 : s0 + m]  # 1-D C views: vectorized loops
                for s in range(m):
                    v = np.float64(xr[s])
                    acc[s] += v * v
            xr = x[b, c, s0 : s0 + m]
            yr = y[b, c, s0 : s0 + m]
            if beta == 0.75:  # the usual value: den^-0.75 from two square roots
                for s in range(m):
                    r = np.sqrt(bias + scale * acc[s])
                    yr[s] = np.float64(xr[s]) / (r * np.sqrt(r))
            elif beta == 0.5:
                for s in range(m):
                    yr[s] = np.float64(xr[s]) / np.sqrt(bias + scale * acc[s])
            else:
                for s in range(m):
                    yr[s] = np.float64(xr[s]) / (bias + scale * acc[s]) ** beta


_BLOCK = 256  # spatial positions per tile: a tile's window sums stay in L1


def _applies(kn: KernelNode) -> str | None:
    why = float_inputs_applies(kn)
    if why:
        return why
    size = kn.attr("size", None)
    if size is None or int(size) < 1:
        return "LRN size missing or not positive"
    return None


def _build_lrn(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    sig = types.void(
        numba_array(c, 3, readonly=True, layout="C"),
        numba_array(c, 3, readonly=False, layout="C"),
        types.int64,
        types.int64,
        types.float64,
        types.float64,
        types.float64,
        types.int64,
    )
    kern = ctx.jit(_lrn, [sig])
    alpha = float(kn.attr("alpha", 1e-4))
    beta = float(kn.attr("beta", 0.75))
    bias = float(kn.attr("bias", 1.0))
    size = int(kn.attr("size"))
    lo = (size - 1) // 2
    name = kn.name

    def run(x: Any) -> tuple[Any, ...]:
        if x.ndim < 3:
            raise InvalidArgument(f"{name}: input must be at least 3-D, got {x.shape}")
        n, ch = x.shape[:2]
        sp = int(np.prod(x.shape[2:]))
        x3 = np.ascontiguousarray(x, dtype=c).reshape(n, ch, sp)
        y = np.empty((n, ch, sp), c)
        if y.size:
            kern(x3.size * size, x3, y, size, lo, alpha / size, beta, bias, _BLOCK)
        res = y.reshape(x.shape)
        return (res.astype(dt) if dt != c else res,)

    return run


numba_kernel("LRN", since=1, applies=_applies)(_build_lrn)
