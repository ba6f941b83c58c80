"""RotaryEmbedding (ai.onnx 23): one compiled pass over (batch, sequence, heads, head_size).

4-D input (batch, heads, seq, head) and 3-D input (batch, seq, heads * head) are both read
through a strided (batch, seq, heads, head) view, so neither is copied; cos/sin are gathered by
position_ids (bounds-checked: a bad position is InvalidArgument naming the node) to (batch, seq,
rotary_dim / 2). Pairs are (k, k + half) or, interleaved, (2k, 2k + 1); dimensions past
rotary_embedding_dim pass through. float16/bfloat16 compute in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import prange, types

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelFn, KernelNode

from ..codegen import compute_dtype, numba_array
from ..registry import BuildContext, numba_kernel

__all__: list[str] = []


def _rope(
    x: Any, cos: Any, sin: Any, rot: int, interleaved: bool, out: Any
) -> None:  # pragma: no cover - compiled by numba
    nb, ns, nh, nd = x.shape
    half = rot // 2
    for r in prange(nb * ns):
        b = r // ns
        s = r % ns
        for h in range(nh):
            for k in range(half):
                if interleaved:
                    i1 = 2 * k
                    i2 = 2 * k + 1
                else:
                    i1 = k
                    i2 = k + half
                x1 = x[b, s, h, i1]
                x2 = x[b, s, h, i2]
                c = cos[b, s, k]
                sn = sin[b, s, k]
                out[b, s, h, i1] = c * x1 - sn * x2
                out[b, s, h, i2] = sn * x1 + c * x2
            for d in range(rot, nd):
                out[b, s, h, d] = x[b, s, h, d]


def _applies(kn: KernelNode) -> str | None:
    for i in range(3):
        v = kn.inputs[i]
        if v is None or v.elem_type is None:
            return "input types unknown at session creation"
    c = compute_dtype(kn.inputs[0].dtype)
    if c is None or c.kind != "f":
        return f"RotaryEmbedding on {kn.inputs[0].dtype} is not compiled by numba"
    return None


def _build(kn: KernelNode, ctx: BuildContext) -> KernelFn:
    dt = kn.inputs[0].dtype
    c = compute_dtype(dt)
    assert c is not None
    sig = types.void(
        numba_array(c, 4, readonly=True, layout="A"),
        numba_array(c, 3, readonly=True, layout="C"),
        numba_array(c, 3, readonly=True, layout="C"),
        types.int64,
        types.boolean,
        numba_array(c, 4, readonly=False, layout="A"),
    )
    kern = ctx.jit(_rope, [sig])  # small inputs run the serial variant
    name = kn.name
    interleaved = bool(kn.attr("interleaved", 0))
    rot_attr = int(kn.attr("rotary_embedding_dim", 0))
    num_heads = int(kn.attr("num_heads", 0))

    def run(x: Any, cos: Any, sin: Any, pos: Any = None) -> tuple[Any, ...]:
        if x.ndim == 4:
            xv = x.transpose(0, 2, 1, 3)  # (batch, seq, heads, head)
        elif x.ndim == 3:
            if num_heads <= 0 or x.shape[2] % num_heads:
                raise InvalidArgument(
                    f"{name}: 3-D input needs num_heads dividing its hidden size {x.shape[2]}"
                )
            xv = x.reshape(x.shape[0], x.shape[1], num_heads, x.shape[2] // num_heads)
        else:
            raise InvalidArgument(f"{name}: input must be 3-D or 4-D, got shape {x.shape}")
        nb, ns, _, nd = xv.shape
        rot = rot_attr or nd
        if rot > nd or rot % 2:
            raise InvalidArgument(
                f"{name}: rotary_embedding_dim {rot} must be even and at most head size {nd}"
            )
        half = rot // 2
        if pos is not None:
            if pos.shape != (nb, ns) or cos.ndim != 2 or sin.ndim != 2:
                raise InvalidArgument(
                    f"{name}: position_ids {pos.shape} must be {(nb, ns)} and the caches 2-D"
                )
            n = min(cos.shape[0], sin.shape[0])
            p = np.asarray(pos, np.int64)
            if p.size and (p.min() < 0 or p.max() >= n):
                raise InvalidArgument(
                    f"{name}: position id out of range for a cache of {n} positions"
                )
            cos, sin = cos[p], sin[p]
        if cos.shape[-1] != half or sin.shape[-1] != half:
            raise InvalidArgument(
                f"{name}: cos/sin caches have last dimension {cos.shape[-1]}/{sin.shape[-1]}, "
                f"expected rotary_embedding_dim / 2 = {half}"
            )
        try:
            cos3 = np.ascontiguousarray(np.broadcast_to(cos, (nb, ns, half)), dtype=c)
            sin3 = np.ascontiguousarray(np.broadcast_to(sin, (nb, ns, half)), dtype=c)
        except ValueError:
            raise InvalidArgument(
                f"{name}: cos/sin caches {cos.shape} do not fit (batch, seq) = {(nb, ns)}"
            ) from None
        xc = xv if xv.dtype == c else xv.astype(c)
        out = np.empty(x.shape, c)
        ov = out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(xv.shape)
        if out.size:
            kern(xc.size, xc, cos3, sin3, rot, interleaved, ov)
        return (out if dt == c else out.astype(dt),)

    return run


numba_kernel("RotaryEmbedding", since=23, applies=_applies)(_build)
