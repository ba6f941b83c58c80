"""MatMul and Gemm: `xp.matmul`, which CuPy runs as cuBLAS GEMM (batched for stacked
operands, with numpy's broadcasting of the batch dimensions)."""

from __future__ import annotations

from typing import Any

from turnout.sdk.provider import KernelFn, KernelNode

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []


@cuda_kernel("MatMul", 13, applies=float_only)
def matmul(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    return lambda a, b: (xp.matmul(a, b),)


@cuda_kernel("Gemm", 11, applies=float_only)
def gemm(kn: KernelNode, be: Backend) -> KernelFn:
    """alpha * A' @ B' + beta * C, C broadcast unidirectionally to the product."""
    xp = be.xp
    alpha, beta = float(kn.attr("alpha", 1.0)), float(kn.attr("beta", 1.0))
    ta, tb = bool(kn.attr("transA", 0)), bool(kn.attr("transB", 0))

    def run(a: Any, b: Any, c: Any = None) -> tuple[Any]:
        y = xp.matmul(a.T if ta else a, b.T if tb else b)
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        if c is not None and beta != 0.0:
            y += c if beta == 1.0 else c * c.dtype.type(beta)
        return (y,)

    return run
