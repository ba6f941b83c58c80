"""com.microsoft QGemm (what onnxruntime's QOperator quantizer makes of a classifier's Gemm) on
the integer GEMM of `quant_matmul`: B (usually a constant weight, transB) packed once when the
kernel is built, the int32 sums stored as the numpy kernel computes them
(`turnout.providers.cpu.kernels.contrib_quantized_matmul.qgemm`):
- with y_scale: `float32(sum + C) * (alpha * a_scale * b_scale / y_scale)` rounded half to even,
  plus y_zero_point, saturated (the `requant` store, C as its int32 bias);
- without: `float32(sum) * (alpha * a_scale * b_scale)` (the `scale` store). A C with a float
  output is left to the numpy kernel (it adds C before scaling, which that store does not).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode

from ..registry import BuildContext, numba_kernel
from .quant_gemm import Params
from .quant_matmul import MatMulEngine, eight_bit_applies, requant_params

__all__: list[str] = []

Array = np.ndarray[Any, Any]


def _given(kn: KernelNode, i: int) -> bool:
    return len(kn.node.inputs) > i and bool(kn.node.inputs[i])


def _applies(kn: KernelNode) -> str | None:
    why = eight_bit_applies(kn, (0, 3))
    if why is None and _given(kn, 7):
        why = eight_bit_applies(kn, (), outputs=True)
    if why is None and _given(kn, 6) and not _given(kn, 7):
        why = "QGemm with C and a float output: the numpy kernel adds C before scaling"
    return why


def _bias(name: str, c: Array | None, m: int, n: int) -> Params:
    """C (int32, broadcast to (M, N)) as the store's bias: per tensor, row, column or element."""
    if c is None:
        return Params(np.zeros(1, np.int32))
    if c.dtype != np.int32:
        raise InvalidArgument(f"{name}: C must be int32, got {c.dtype}")
    try:
        if np.broadcast_shapes(c.shape, (m, n)) != (m, n):
            raise ValueError
    except ValueError:
        raise InvalidArgument(f"{name}: C {c.shape} does not broadcast to {(m, n)}") from None
    c2 = c.reshape((1,) * (2 - c.ndim) + c.shape)
    rows, cols = c2.shape[0] > 1, c2.shape[1] > 1
    data = np.ascontiguousarray(c2).reshape(-1)
    return Params(data, (n if cols else 1) if rows else 0, int(cols))


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name = kn.name
    alpha = np.float32(kn.attr("alpha", 1.0))
    trans_a, trans_b = bool(kn.attr("transA", 0)), bool(kn.attr("transB", 0))
    quantized = _given(kn, 7)
    out = np.dtype(kn.outputs[0].dtype) if quantized else np.dtype(np.float32)
    engine = MatMulEngine(kn, ctx, "requant" if quantized else "scale", out, 3, 5, trans_b)

    def run(
        a: Array, a_s: Any, a_zp: Any, b: Array, b_s: Any, b_zp: Any,
        c: Array | None = None, y_s: Any = None, y_zp: Any = None,
    ) -> tuple[Array]:  # fmt: skip
        if a.ndim != 2 or b.ndim != 2:
            raise InvalidArgument(f"{name}: QGemm needs 2-D A and B, got {a.shape}, {b.shape}")
        if y_zp is not None and y_zp.dtype != out:
            raise InvalidArgument(f"{name}: y_zero_point type {y_zp.dtype} is not {out}")
        a2 = np.ascontiguousarray(a.T) if trans_a else a
        # (alpha goes with a_scale: (alpha * a_scale) * b_scale, as the numpy kernel rounds)
        sa = alpha * np.asarray(a_s, np.float32)

        def params(rows: int, cols: int, m: int) -> tuple[Params, Params, Params]:
            bias = _bias(name, c, rows, cols)
            if quantized:
                mult, zp = requant_params(name, rows, cols, m, sa, b_s, y_s, y_zp)
                return mult, bias, zp
            one = np.float32(1)
            mult, _ = requant_params(name, rows, cols, m, sa, b_s, one, None)
            return mult, Params(np.zeros(1, np.float32)), Params(np.zeros(1, np.int32))

        return (engine.product(a2, b, a_zp, b_zp, out, params),)

    return run


numba_kernel("QGemm", since=1, domain=DOMAIN, applies=_applies)(_build)
