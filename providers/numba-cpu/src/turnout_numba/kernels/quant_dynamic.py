"""ai.turnout::DynamicQuantizeMatMul (the optimizer's fusion of onnxruntime's dynamically
quantized MatMul; inputs as onnxruntime's com.microsoft op: A, B, b_scale, b_zero_point, bias):
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
from numba import prange, types

from turnout.errors import InvalidArgument
from turnout.provider import KernelFn, KernelNode

from .. import cache
from ..codegen import numba_array
from ..registry import BuildContext, numba_kernel
from .quant_gemm import Params
from .quant_matmul import MatMulEngine, eight_bit_applies

__all__: list[str] = []

_UNITUPLE: Any = types.UniTuple  # (numba's type constructors are untyped)
_PAIR = _UNITUPLE(types.float32, 2)

Array = np.ndarray[Any, Any]


def _range(x: Any) -> Any:  # pragma: no cover - compiled by numba
    """(min(x, 0), max(x, 0))."""
    lo = np.float32(0)
    hi = np.float32(0)
    for i in range(x.shape[0]):
        v = x[i]
        lo = min(lo, v)
        hi = max(hi, v)
    return lo, hi


def _quantize(x: Any, scale: Any, zp: Any, out: Any) -> None:  # pragma: no cover
    """out = saturate(round_half_even(x / scale) + zp) into uint8 (MLAS QuantizeLinear)."""
    for i in prange(x.shape[0]):
        v = x[i] / scale
        v = (v + np.float32(12582912.0)) - np.float32(12582912.0)
        v = v + zp
        v = max(v, np.float32(0))
        v = min(v, np.float32(255))
        out[i] = np.uint8(v)


def _applies(kn: KernelNode) -> str | None:
    a = kn.inputs[0]
    if a is None or a.elem_type is None or a.dtype != np.float32:
        return "DynamicQuantizeMatMul: A must be float32 known at session creation"
    return eight_bit_applies(kn, (1,))


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    name = kn.name
    engine = MatMulEngine(kn, ctx, "scale", np.float32, 1, 3)
    vec = numba_array(np.dtype(np.float32), 1, readonly=True, layout="C")
    rng = cache.jit(_range, [_PAIR(vec)])  # (a reduction: serial)
    f32 = types.float32
    u8 = numba_array(np.dtype(np.uint8), 1, readonly=False, layout="C")
    quant = ctx.jit(_quantize, [types.void(vec, f32, f32, u8)])

    def run(a: Array, b: Array, b_s: Array, b_zp: Any = None, bias: Any = None) -> tuple[Array]:
        if a.dtype != np.float32:
            raise InvalidArgument(f"{name}: A must be float32, got {a.dtype}")
        flat = np.ascontiguousarray(a).reshape(-1)
        lo, hi = rng(flat) if flat.size else (np.float32(0), np.float32(0))
        # onnxruntime's GetQuantizationParameter, in float32
        scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
        zf = np.float32(np.rint(min(max(np.float32(0) - lo / scale, 0), 255)))
        q = np.empty(flat.size, np.uint8)
        quant(flat.size, flat, scale, zf, q)
        n = b.shape[-1]
        bs = np.asarray(b_s, np.float32).reshape(-1)
        if bs.size not in (1, n):
            raise InvalidArgument(
                f"{name}: b_scale of shape {b_s.shape} must be a scalar or ({n},)"
            )

        def params(rows: int, cols: int, m: int) -> tuple[Params, Params, Params]:
            mult = Params(np.ascontiguousarray(scale * bs), 0, int(bs.size > 1))
            if bias is None:
                add = Params(np.zeros(1, np.float32))
            else:
                add = Params(np.ascontiguousarray(np.broadcast_to(bias, (cols,)), np.float32), 0, 1)
            return mult, add, Params(np.zeros(1, np.int32))

        a_zp = np.asarray(np.uint8(zf))
        return (engine.product(q.reshape(a.shape), b, a_zp, b_zp, np.dtype(np.float32), params),)

    return run


numba_kernel("DynamicQuantizeMatMul", since=1, domain="ai.turnout", applies=_applies)(_build)
