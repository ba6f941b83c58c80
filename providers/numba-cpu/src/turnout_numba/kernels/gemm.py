"""FusedGemm (ai.turnout): BLAS for the product, one compiled pass for bias and activation.

The optimizer turns MatMul+Add and Gemm(+activation) into FusedGemm. The product stays with
numpy's BLAS (numba's own loops cannot beat it); what numba buys is the epilogue: numpy spends
a pass per operation on `alpha`, `+ beta * C` and the activation (Gelu's erf alone costs ten
times the GEMM), the epilogue spends one. An N-D A with contiguous rows is multiplied as one
2-D GEMM rather than one per leading index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode
from turnout.providers.cpu.kernels.fused import activation_of

from ..registry import BuildContext, float_inputs_applies, numba_kernel
from .epilogue import Epilogue

__all__: list[str] = []


def _fused_gemm_applies(kn: KernelNode) -> str | None:
    why = float_inputs_applies(kn, 2, narrow=False)
    if why is None:
        try:
            activation_of(kn)
        except InvalidArgument as e:
            return str(e)
    return why


def present(kn: KernelNode, i: int) -> bool:
    """Whether optional input `i` is wired (an absent one is missing or named "")."""
    return len(kn.node.inputs) > i and bool(kn.node.inputs[i])


def _build_fused_gemm(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    act = activation_of(kn)
    alpha = float(kn.attr("alpha", 1.0))
    beta = float(kn.attr("beta", 1.0))
    trans_a = bool(kn.attr("transA", 0))
    trans_b = bool(kn.attr("transB", 0))
    name = kn.name
    scale = alpha != 1.0
    plain = Epilogue(dt, act, ctx.parallel, scale=scale)
    with_c = present(kn, 2) and beta != 0.0
    by_col = Epilogue(dt, act, ctx.parallel, scale=scale, col=True) if with_c else plain
    by_full = Epilogue(dt, act, ctx.parallel, scale=scale, full=True) if with_c else plain

    def run(a: Any, b: Any, c: Any = None) -> tuple[Any]:
        if b.ndim != 2 or a.ndim < 2 or (trans_a and a.ndim != 2):
            raise InvalidArgument(f"{name}: FusedGemm needs 2-D B and 2-D (or N-D) A")
        if a.dtype != dt or b.dtype != dt:
            raise InvalidArgument(f"{name}: A {a.dtype} and B {b.dtype} must both be {dt}")
        aa = a.T if trans_a else a
        bb = b.T if trans_b else b
        if aa.shape[-1] != bb.shape[0]:
            raise InvalidArgument(f"{name}: inner dimensions of {a.shape}, {b.shape} differ")
        out_shape = (*aa.shape[:-1], bb.shape[1])
        rows, cols = int(np.prod(out_shape[:-1])), out_shape[-1]
        if aa.ndim > 2 and aa.flags.c_contiguous:
            aa = aa.reshape(rows, aa.shape[-1])  # one GEMM, not one per leading index
        y = np.matmul(aa, bb).reshape(out_shape)
        y3 = y.reshape(1, rows, cols)
        if not with_c or c is None:
            plain(y3, alpha=alpha)
            return (y,)
        c = c.astype(dt, copy=False)
        try:
            if np.broadcast_shapes(c.shape, out_shape) != out_shape:
                raise ValueError
        except ValueError:
            raise InvalidArgument(
                f"{name}: C {c.shape} does not broadcast to the output {out_shape}"
            ) from None
        if all(d == 1 for d in c.shape[:-1]):  # a bias row (or a scalar)
            row = c.reshape(c.shape[-1:] if c.ndim else (1,))
            by_col(y3, col=np.ascontiguousarray(np.broadcast_to(row, (cols,))), alpha=alpha,
                   beta=beta)  # fmt: skip
        else:
            full = np.ascontiguousarray(np.broadcast_to(c, out_shape)).reshape(y3.shape)
            by_full(y3, full=full, alpha=alpha, beta=beta)
        return (y,)

    return run


numba_kernel("FusedGemm", since=1, domain="ai.turnout", applies=_fused_gemm_applies)(
    _build_fused_gemm
)
