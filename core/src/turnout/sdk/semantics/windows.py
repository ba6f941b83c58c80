"""The window-function ops (HannWindow, HammingWindow, BlackmanWindow) as generalized cosine
windows: w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), with N the size (periodic) or
size - 1 (symmetric). Providers take the coefficients and period here."""

from __future__ import annotations

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode

__all__ = ["COSINE_WINDOWS", "window_period"]

COSINE_WINDOWS: dict[str, tuple[float, float, float]] = {
    "HannWindow": (0.5, 0.5, 0.0),
    "HammingWindow": (25 / 46, 21 / 46, 0.0),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}
"""(a0, a1, a2) of each op (ONNX's function bodies' constants)."""


def window_period(node: KernelNode, size: int) -> int:
    """N in the cosine terms: the size for a periodic window (the default), size - 1 for a
    symmetric one. A negative size raises."""
    if size < 0:
        raise InvalidArgument(f"{node.name}: window size must be >= 0, got {size}")
    return size if int(node.attr("periodic", 1)) else size - 1
