"""CausalConvWithState (ai.onnx 27) on `be.xp`: a depthwise causal 1-D convolution.

The checks and activation are `turnout.sdk.semantics.causal_conv`'s. The input is left-padded by
the past state (or zeros); the output is the sum over the kernel's k taps of a shifted view
of the padded input times that tap's per-channel weight (k broadcast multiply-adds; causal
convolutions have k of 2..8), plus bias, then x * sigmoid(x) for silu/swish in float32 at
least. present_state is the padded input's last k-1 columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.causal_conv import causal_conv_activation, causal_conv_shapes

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []


def _shape(v: Any) -> Any:
    return None if v is None else v.shape


@cuda_kernel("CausalConvWithState", 27, applies=float_only)
def causal_conv_with_state(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    silu = causal_conv_activation(kn) == "silu"

    def run(x: Any, w: Any, bias: Any = None, past: Any = None) -> tuple[Any, Any]:
        s = causal_conv_shapes(kn.name, x.shape, w.shape, _shape(bias), _shape(past))
        ct = np.float32 if x.dtype.itemsize < 4 else x.dtype
        if past is None:
            past = xp.zeros((s.batch, s.channels, s.kernel - 1), x.dtype)
        padded = xp.concatenate([past.astype(x.dtype, copy=False), x], axis=2)
        taps = w[:, 0, :].astype(ct)[None, :, :, None]  # (1, channels, k, 1)
        y = xp.zeros(x.shape, ct)
        for j in range(s.kernel):
            y = y + taps[:, :, j] * padded[:, :, j : j + s.length]
        if bias is not None:
            y = y + bias.astype(ct)[None, :, None]
        if silu:
            y = y * (0.5 * xp.tanh(0.5 * y) + 0.5)
        return y.astype(x.dtype), padded[:, :, s.length :]

    return run
