"""BatchNormalization in inference mode: one pass y = x * a[c] + b[c] over (N*C) planes.

The kernel runs over the (N*C, spatial) view of X in parallel over planes. Each plane first
computes its factors in X's compute dtype, in onnxruntime's order (the numpy kernel's):
a = (1 / sqrt(var + epsilon)) * scale and b = B - mean * a (from float64 copies of the
parameters, exact for float32 ones, so no numpy arithmetic per call); the contiguous inner loop
y = x * a + b then vectorizes in that dtype (a multiply and an add, no fused multiply-add).
Bit-equal factors matter where Y is rounded to uint8 next (a dynamically quantized model).

Semantics follow the CPU provider's kernel for every version: training (opset >= 14:
training_mode=1; 7..13: more than one output; < 7: is_test=0 with more than one output) is
declined, as is any wired running-statistics output. Like the CPU kernel, parameters are either
(C,) or X.shape[1:] (spatial=0 before opset 9); float16/bfloat16 compute in float32 and cast
back; scale/B/mean/var may have their own dtypes (T1/T2 from opset 15).
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


def _batchnorm(
    x: Any, scale: Any, bias: Any, mean: Any, var: Any, eps: float, y: Any
) -> None:  # pragma: no cover - compiled by numba
    planes, s = x.shape
    c = scale.shape[0]
    t = x.dtype.type
    if scale.shape[1] == 1:
        for p in prange(planes):
            ch = p % c
            av = (t(1) / np.sqrt(t(var[ch, 0]) + t(eps))) * t(scale[ch, 0])
            bv = t(bias[ch, 0]) - t(mean[ch, 0]) * av
            xr = x[p]
            yr = y[p]
            for j in range(s):
                yr[j] = xr[j] * av + bv
    else:  # per-element parameters, shape (C, S)
        for p in prange(planes):
            ch = p % c
            xr = x[p]
            yr = y[p]
            sr = scale[ch]
            br = bias[ch]
            mr = mean[ch]
            vr = var[ch]
            for j in range(s):
                a = (t(1) / np.sqrt(t(vr[j]) + t(eps))) * t(sr[j])
                yr[j] = xr[j] * a + (t(br[j]) - t(mr[j]) * a)


def _training(kn: KernelNode) -> bool:
    """Whether the CPU kernel would run this node in training mode (its exact rule)."""
    n_out = len(kn.node.outputs)
    if kn.since_version >= 14:
        return bool(kn.attr("training_mode", 0))
    if kn.since_version >= 7:
        return n_out > 1
    return not kn.attr("is_test", 0) and n_out > 1


def _bn_applies(kn: KernelNode) -> str | None:
    why = float_inputs_applies(kn)
    if why:
        return why
    if _training(kn):
        return "training mode is not compiled by numba"
    if any(kn.node.outputs[1:]):
        return "running-statistics outputs are not compiled by numba"
    for i, info in enumerate(kn.inputs[1:5], 1):
        if info is None:
            return f"input {i} is absent"
    return None


def _build_batchnorm(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    f64 = np.dtype(np.float64)
    param_t = numba_array(f64, 2, readonly=True, layout="C")
    sig = types.void(
        numba_array(c, 2, readonly=True, layout="C"),
        param_t,
        param_t,
        param_t,
        param_t,
        types.float64,
        numba_array(c, 2, readonly=False, layout="C"),
    )
    kern = ctx.jit(_batchnorm, [sig])
    eps = float(kn.attr("epsilon", 1e-5))
    name = kn.name
    n_out = len(kn.node.outputs)
    whats = ("scale", "B", "mean", "var")

    def run(x: Any, *params: Any) -> tuple[Any, ...]:
        if x.ndim < 2:
            raise InvalidArgument(f"{name}: input must be at least 2-D, got {x.shape}")
        ch = x.shape[1]
        ps = []
        full = False
        for v, what in zip(params, whats):
            p = np.asarray(v)
            if p.shape == (ch,):
                p = p.reshape(ch, 1)
            elif p.shape == x.shape[1:]:  # spatial=0 before opset 9
                p = p.reshape(ch, -1)
                full = True
            else:
                raise InvalidArgument(f"{name}: {what} has shape {p.shape}, expected ({ch},)")
            ps.append(p)
        if full:  # mixed (C,) and X.shape[1:] parameters broadcast as in the CPU kernel
            ps = list(np.broadcast_arrays(*ps))
        s, bb, m, v = (np.ascontiguousarray(p, dtype=f64) for p in ps)
        planes = x.shape[0] * ch
        x2 = np.ascontiguousarray(x, dtype=c).reshape(planes, -1 if planes else 0)
        y = np.empty(x2.shape, c)
        if x2.size:
            kern(x2.size, x2, s, bb, m, v, eps, y)
        yy = y.reshape(x.shape)
        return (yy.astype(dt) if dt != c else yy,) + (None,) * (n_out - 1)

    return run


numba_kernel("BatchNormalization", since=1, applies=_bn_applies)(_build_batchnorm)
