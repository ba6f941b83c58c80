"""CuPyAllocator: device arrays from CuPy's memory pool.

CuPy's default `MemoryPool` keeps freed device blocks in size bins and hands them out again;
every array a kernel makes (cupy.empty, the result of cupy.matmul) comes from it, and an array
returns its block when it is garbage collected. Allocation is stream-ordered by CuPy: a block
freed by one stream is reused on that stream only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.sdk.provider import Allocator, Device

__all__ = ["CuPyAllocator"]


class CuPyAllocator(Allocator):
    def __init__(self, device: Device) -> None:
        import cupy

        self.device = device
        self._cupy = cupy
        self.pool = cupy.get_default_memory_pool()

    def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        with self._cupy.cuda.Device(self.device.id):
            return self._cupy.empty(shape, dtype)

    @property
    def held_bytes(self) -> int:
        """Bytes the pool keeps for reuse (not handed out)."""
        return int(self.pool.total_bytes() - self.pool.used_bytes())

    def free_held(self) -> None:
        self.pool.free_all_blocks()
