"""onnxruntime's blocked channel layout (NCHWc), the layout of its `com.microsoft.nchwc` ops.

onnxruntime optimizing at ORT_ENABLE_ALL rewrites float Conv, pooling and 2x Resize nodes into
the `com.microsoft.nchwc` domain, and saves them that way (`optimized_model_filepath`). A value
between two such ops has the shape [N, Cp, H, W], Cp the channel count padded to the block
size b, but its memory holds [N, Cp/b, H, W, b]: b channels side by side at each pixel. turnout
keeps that memory as onnxruntime does (an array of shape [N, Cp, H, W] whose C-order bytes are
the blocks), so that the plain ops onnxruntime leaves between nchwc ops (Add, Sum, Concat of
block-aligned inputs) compute on it exactly as onnxruntime's do.

The saved Conv weights are blocked too, padded to whole blocks of output channels:
- `OIHWBiBo` ([Mp/b, Ci/b, kH, kW, b_in, b_out]) when the input is blocked;
- `OIHWBo` ([Mp/b, Ci, kH, kW, b_out]) when the input is plain NCHW with fewer than b channels
  (a network's first Conv) and for depthwise Convs (one input channel per group).

b is the machine's, as onnxruntime's MLAS picks it: 16 where AVX-512F is available, else 8. A
model saved on a machine with another block size holds weights in another layout: onnxruntime
itself computes garbage with it, and turnout refuses shapes that are not whole blocks.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

__all__ = [
    "DOMAIN",
    "block_size",
    "padded_channels",
    "to_blocked",
    "from_blocked",
    "unblock_filter",
]

DOMAIN = "com.microsoft.nchwc"

Array = np.ndarray[Any, Any]


@cache
def block_size() -> int:
    """The NCHWc block size onnxruntime uses on this machine (MLAS: 16 with AVX-512F, else 8)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import (  # type: ignore[no-redef]
            __cpu_features__ as features,
        )
    return 16 if features.get("AVX512F", False) else 8


def padded_channels(channels: int, block: int) -> int:
    """`channels` rounded up to whole blocks."""
    return -(-channels // block) * block


def to_blocked(x: Array, block: int) -> Array:
    """A plain [N, C, H, W] array as an NCHWc value: channels zero-padded to whole blocks, shape
    [N, Cp, H, W], memory [N, Cp/b, H, W, b]."""
    n, c, *spatial = x.shape
    cp = padded_channels(c, block)
    if cp != c:
        x = np.concatenate([x, np.zeros((n, cp - c, *spatial), x.dtype)], axis=1)
    blocks = x.reshape(n, cp // block, block, *spatial)
    return np.ascontiguousarray(np.moveaxis(blocks, 2, -1)).reshape(n, cp, *spatial)


def from_blocked(x: Array, block: int) -> Array:
    """An NCHWc value as a plain [N, Cp, H, W] array (padding channels kept)."""
    n, cp, *spatial = x.shape
    blocks = np.ascontiguousarray(x).reshape(n, cp // block, *spatial, block)
    return np.moveaxis(blocks, -1, 2).reshape(n, cp, *spatial)


def unblock_filter(w: Array, block: int, blocked_input: bool) -> Array:
    """A saved nchwc Conv filter [Mp, Ci, kH, kW] as a plain OIHW array.

    `blocked_input`: the filter is OIHWBiBo (Ci is whole blocks), else OIHWBo.
    """
    mp, ci, *k = w.shape
    flat = np.ascontiguousarray(w)
    if blocked_input:
        t = flat.reshape(mp // block, ci // block, *k, block, block)
        # [O/b, I/b, kH, kW, bi, bo] -> [O/b, bo, I/b, bi, kH, kW]
        t = t.transpose(0, 5, 1, 4, 2, 3)
    else:
        t = flat.reshape(mp // block, ci, *k, block)
        t = t.transpose(0, 4, 1, 2, 3)  # [O/b, I, kH, kW, bo] -> [O/b, bo, I, kH, kW]
    out: Array = t.reshape(mp, ci, *k)
    return out
