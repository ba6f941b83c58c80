"""ExampleAllocator: where the provider's buffers live.

This template keeps its values in host memory as numpy arrays, so it runs anywhere. A real
accelerator sets DEVICE to its own device (`Device("cuda", 0)`, `Device("opencl", 0)`, ...),
allocates device memory in `_empty` (usually from a pool), and returns its own array type.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from turnout.provider import Allocator, Device

__all__ = ["DEVICE", "ExampleAllocator"]

DEVICE = Device("cpu")


class ExampleAllocator(Allocator):
    device = DEVICE

    def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return np.empty(shape, dtype)
