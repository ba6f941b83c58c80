"""OpenCLAllocator: pyopencl Arrays backed by a buffer pool that reuses buffers by size.

pyopencl's `MemoryPool` keeps freed buffers in power-of-two size bins; an Array returns its
buffer to the pool when the last Array over it (the value and any view of it) is dropped, which
the plan does right after it calls `free` on a dead value. The queue is in order, so a recycled
buffer is only written by kernels enqueued after every kernel that read its previous contents.

Every buffer turnout and the kernels ask for goes through `empty` (or `upload`), so the counters
say how well the pool works: `requests` buffers asked for, `device_allocations` of them newly
allocated on the device, `hits` served from freed buffers, `frees` dead values handed back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import Allocator, Device

__all__ = ["OpenCLAllocator"]


class OpenCLAllocator(Allocator):
    pools = True  # buffers go back to pyopencl's memory pool (`_free`)

    def __init__(self, queue: cl.CommandQueue, device: Device, storable: Any = None) -> None:
        super().__init__(device)
        self.queue = queue
        self.pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
        self.storable = storable
        """The dtypes the device holds (None: any); another dtype is an InvalidArgument."""
        self.requests = 0
        self.device_allocations = 0
        self.frees = 0

    def __call__(self, nbytes: int) -> Any:
        """pyopencl's allocator protocol: a buffer of at least `nbytes`, from the pool."""
        managed = self.pool.managed_bytes
        buf = self.pool(nbytes)
        self.requests += 1
        if self.pool.managed_bytes > managed:  # the pool had no free buffer of that size
            self.device_allocations += 1
        return buf

    @property
    def hits(self) -> int:
        """Buffers served from the pool's freed ones, without a device allocation."""
        return self.requests - self.device_allocations

    def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> cla.Array:
        if self.storable is not None and dtype not in self.storable:
            raise InvalidArgument(f"the OpenCL device cannot hold {dtype} tensors")
        return cla.empty(self.queue, shape, dtype, allocator=self)

    def _free(self, value: Any) -> None:
        if isinstance(value, cla.Array) and value.context == self.queue.context:
            self.frees += 1

    def upload(self, host: np.ndarray) -> cla.Array:
        # not np.ascontiguousarray: it turns a 0-d array into shape (1,)
        host = host if host.flags.c_contiguous else host.copy(order="C")
        return cla.to_device(self.queue, host, allocator=self)

    @property
    def held_bytes(self) -> int:
        """Bytes the pool keeps for reuse (not handed out)."""
        return int(self.pool.held_blocks)

    def free_held(self) -> None:
        self.pool.free_held()
