"""What an ai.onnx.preview::FlexAttention node means: its sizes, scale and softmax type.

Q (batch, q_heads, q_len, head), K (batch, kv_heads, kv_len, head) and V (batch, kv_heads,
kv_len, v_head); query head h reads kv head h // (q_heads / kv_heads). Scores are scaled by
`scale` (default 1/sqrt(head)), softmax runs in `softmax_precision` (default: float32 for
16-bit inputs, else the input's type), between the optional score_mod and prob_mod graphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from turnout.graph.errors import InvalidArgument

__all__ = ["FlexAttentionShapes", "flex_attention_shapes", "flex_softmax_dtype"]

_PRECISIONS = {
    int(TensorProto.FLOAT): "float32",
    int(TensorProto.FLOAT16): "float16",
    int(TensorProto.DOUBLE): "float64",
    int(TensorProto.BFLOAT16): "bfloat16",
}


def flex_softmax_dtype(name: str, input_dtype: Any, precision: int | None) -> str:
    """The softmax's type name: `softmax_precision` (an ONNX element type) or the default."""
    if precision is not None:
        if int(precision) not in _PRECISIONS:
            raise InvalidArgument(f"{name}: unsupported softmax_precision {precision}")
        return _PRECISIONS[int(precision)]
    dt = np.dtype(input_dtype)
    return "float32" if dt.itemsize < 4 else dt.name


@dataclass(frozen=True)
class FlexAttentionShapes:
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head: int
    v_head: int
    group: int
    scale: float


def flex_attention_shapes(
    name: str, q: Any, k: Any, v: Any, scale: float | None
) -> FlexAttentionShapes:
    """Check the shapes (tuples of ints) of Q, K and V and return the run's sizes."""
    q, k, v = tuple(q), tuple(k), tuple(v)
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise InvalidArgument(f"{name}: Q, K and V must be 4-D, got {q}, {k} and {v}")
    b, hq, lq, e = q
    if k[0] != b or v[0] != b or k[1] != v[1] or k[2] != v[2] or k[3] != e:
        raise InvalidArgument(
            f"{name}: K {k} and V {v} must share batch, heads and length, and K the head "
            f"size of Q {q}"
        )
    hkv = k[1]
    if hkv <= 0 or hq % hkv:
        raise InvalidArgument(f"{name}: {hq} query heads are not a multiple of {hkv} kv heads")
    s = 1.0 / float(np.sqrt(e)) if scale is None else float(scale)
    return FlexAttentionShapes(b, hq, hkv, lq, k[2], e, v[3], hq // hkv, s)
