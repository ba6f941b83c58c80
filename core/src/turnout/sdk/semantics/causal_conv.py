"""What a CausalConvWithState node (ai.onnx 27) means: its activation and input checks.

A depthwise 1-D convolution over (batch, channels, length), left-padded by the past state (or
zeros) so that output t sees inputs t-k+1..t; `present_state` is the last k-1 columns of the
padded input; `activation` silu/swish applies x * sigmoid(x) to the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode

__all__ = ["CausalConvShapes", "causal_conv_activation", "causal_conv_shapes"]


def causal_conv_activation(node: KernelNode) -> str:
    """'none' or 'silu' (swish is the same function)."""
    act = node.attr("activation", "none")
    if isinstance(act, bytes):
        act = act.decode()
    if act not in ("none", "silu", "swish"):
        raise InvalidArgument(
            f"{node.name}: unsupported activation {act!r}, expected none, silu or swish"
        )
    return "none" if act == "none" else "silu"


@dataclass(frozen=True)
class CausalConvShapes:
    batch: int
    channels: int
    length: int
    kernel: int


def causal_conv_shapes(
    name: str, x: Any, w: Any, bias: Any | None = None, past: Any | None = None
) -> CausalConvShapes:
    """Check the inputs' shapes (tuples of ints; None for an absent input)."""
    if len(x) != 3:
        raise InvalidArgument(f"{name}: input must be (batch, channels, length), got {x}")
    b, c, n = x
    if len(w) != 3 or w[0] != c or w[1] != 1 or w[2] < 1:
        raise InvalidArgument(f"{name}: weight {w} must be (channels={c}, 1, kernel >= 1)")
    k = w[2]
    if bias is not None and tuple(bias) != (c,):
        raise InvalidArgument(f"{name}: bias {bias} must be ({c},)")
    if past is not None and tuple(past) != (b, c, k - 1):
        raise InvalidArgument(f"{name}: past_state {past} must be {(b, c, k - 1)}")
    return CausalConvShapes(b, c, n, k)
