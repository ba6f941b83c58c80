"""com.microsoft::DynamicQuantizeMatMul (what the optimizer fuses onnxruntime's dynamically
quantized MatMul into, as onnxruntime does; A, B, b_scale, b_zero_point, bias):
A is quantized to uint8 with its own range (as DynamicQuantizeLinear: the range holds 0, scale
`(max - min) / 255`, zero point rounded half to even), multiplied by the 8-bit B in int32
(`quant_matmul.MatMulEngine`: the VNNI tiles or the int16 GEMM) and scaled as it is stored,
`float32(sum) * float32(a_scale * b_scale) + bias`: the unfused graph's operations in its
order, so its result bit for bit. Two passes over A (its range, then its quantization), none
over the int32 product.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode

from ..registry import BuildContext, numba_kernel
from .quant_gemm import Params
from .quant_linear import DynamicQuantizer
from .quant_matmul import MatMulEngine, eight_bit_applies

__all__: list[str] = []


Array = np.ndarray[Any, Any]


def _applies(kn: KernelNode) -> str | None:
    a = kn.inputs[0]
    if a is None or a.elem_type is None or a.dtype != np.float32:
        return "DynamicQuantizeMatMul: A must be float32 known at session creation"
    return eight_bit_applies(kn, (1,))


NO_ZERO = Params(np.zeros(1, np.int32))


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name = kn.name
    kept: list[Any] = [None]  # (bias, its full row as Params)

    def bias_row(bias: Any, cols: int) -> Params:
        """The bias as a full float32 row, kept while the same read-only bias comes in."""
        last = kept[0]
        if last is not None and last[0] is bias and last[1].data.shape[0] == cols:
            return last[1]  # type: ignore[no-any-return]
        row = np.zeros(cols, np.float32) if bias is None else bias
        row = np.ascontiguousarray(np.broadcast_to(row, (cols,)), np.float32)
        p = Params(row, 0, 1)
        if bias is None or not bias.flags.writeable:
            kept[0] = (bias, p)
        return p

    engine = MatMulEngine(kn, ctx, "scale", np.float32, 1, 3)
    dq = DynamicQuantizer(ctx)

    def run(a: Array, b: Array, b_s: Array, b_zp: Any = None, bias: Any = None) -> tuple[Array]:
        if a.dtype != np.float32:
            raise InvalidArgument(f"{name}: A must be float32, got {a.dtype}")
        q, scale, zp = dq(a)
        n = b.shape[-1]
        bs = np.asarray(b_s, np.float32).reshape(-1)
        if bs.size not in (1, n):
            raise InvalidArgument(
                f"{name}: b_scale of shape {b_s.shape} must be a scalar or ({n},)"
            )

        def params(rows: int, cols: int, m: int) -> tuple[Params, Params, Params]:
            # full rows: the store takes them as they are (A's scale changes every run)
            mult = np.empty(cols, np.float32)
            np.multiply(scale, bs, out=mult)
            return Params(mult, 0, 1), bias_row(bias, cols), NO_ZERO

        a_zp = np.asarray(zp)
        return (engine.product(q, b, a_zp, b_zp, np.dtype(np.float32), params),)

    return run


numba_kernel("DynamicQuantizeMatMul", since=1, domain=DOMAIN, applies=_applies)(_build)
