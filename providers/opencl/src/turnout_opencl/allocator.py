"""OpenCLAllocator: pyopencl Arrays backed by a buffer pool that reuses buffers by size.

pyopencl's `MemoryPool` keeps freed buffers in power-of-two size bins; an Array returns its
buffer to the pool when it is garbage collected. The queue is in order, so a recycled buffer is
only written by kernels enqueued after every kernel that read its previous contents.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools

from turnout.provider import Allocator, Device

__all__ = ["OpenCLAllocator"]


class OpenCLAllocator(Allocator):
    def __init__(self, queue: cl.CommandQueue, device: Device) -> None:
        self.queue = queue
        self.device = device
        self.pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))

    def __call__(self, nbytes: int) -> Any:
        """pyopencl's allocator protocol: a buffer of at least `nbytes`."""
        return self.pool(nbytes)

    def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> cla.Array:
        return cla.empty(self.queue, shape, dtype, allocator=self.pool)

    def upload(self, host: np.ndarray) -> cla.Array:
        # not np.ascontiguousarray: it turns a 0-d array into shape (1,)
        host = host if host.flags.c_contiguous else host.copy(order="C")
        return cla.to_device(self.queue, host, allocator=self.pool)

    @property
    def held_bytes(self) -> int:
        """Bytes the pool keeps for reuse (not handed out)."""
        return int(self.pool.held_blocks)

    def free_held(self) -> None:
        self.pool.free_held()
