"""OpenCLDataTransfer: numpy <-> pyopencl.array.Array on one session's context.

A value counts as on this device only when it is a pyopencl Array of this provider's context
(each session has its own); an Array of another context is copied through the host.
`copy_tensors` enqueues a batch of copies on the session's queue without waiting when given
the stream (turnout waits on an event before a host reader), and blocks without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyopencl.array as cla

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import DataTransfer, Device, Stream

from .allocator import OpenCLAllocator
from .runtime import CTYPES

__all__ = ["OpenCLDataTransfer"]


class OpenCLDataTransfer(DataTransfer):
    batched = True

    def __init__(self, allocator: OpenCLAllocator) -> None:
        super().__init__(allocator.device)
        self.allocator = allocator
        self.context = allocator.queue.context
        self.to_device_count = 0
        self.to_host_count = 0
        self.batches = 0

    def is_device_value(self, value: Any) -> bool:
        return isinstance(value, cla.Array) and value.context == self.context

    def copy_tensors(self, pairs: Sequence[tuple[Any, Any]], stream: Stream | None = None) -> None:
        queue = stream.handle if stream is not None and stream.handle is not None else None
        queue = queue or self.allocator.queue
        wait = stream is None
        self.batches += 1
        for i, (src, dst) in enumerate(pairs):
            if tuple(src.shape) != tuple(dst.shape) or src.dtype != dst.dtype:
                raise InvalidArgument(
                    f"copy_tensors: pair {i}: {src.dtype}{list(src.shape)} into "
                    f"{dst.dtype}{list(dst.shape)}"
                )
            if self.is_device_value(dst):
                host = self._host_tensor(src)
                self.to_device_count += 1
                if host.size:
                    dst.set(host, queue=queue, async_=not wait)
            elif isinstance(dst, np.ndarray):
                if not self.is_device_value(src):
                    np.copyto(dst, self._host_tensor(src))
                    continue
                self.to_host_count += 1
                if src.size:
                    _, event = src.get_async(queue=queue, ary=dst)
                    if wait:
                        event.wait()
            else:
                raise InvalidArgument(
                    f"copy_tensors: pair {i}: destination {type(dst).__name__} is neither a "
                    "host array nor a buffer of this OpenCL context"
                )

    def _host_tensor(self, value: Any) -> np.ndarray:
        if isinstance(value, cla.Array):  # another session's context: through the host
            value = value.get()
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            raise InvalidArgument(
                f"the OpenCL device holds tensors only, not {type(value).__name__}"
            )
        if value.dtype not in CTYPES:
            raise InvalidArgument(f"the OpenCL device cannot hold {value.dtype} tensors")
        # not np.ascontiguousarray: it turns a 0-d array into shape (1,)
        return value if value.flags.c_contiguous else value.copy(order="C")

    def _to_device(self, value: Any, device: Device) -> Any:
        if value is None or self.is_device_value(value):
            return value
        host = self._host_tensor(value)
        self.to_device_count += 1
        return self.allocator.upload(host)

    def _to_host(self, value: Any) -> np.ndarray:
        if not isinstance(value, cla.Array):
            if value is None or isinstance(value, np.ndarray):
                return value  # type: ignore[return-value]
            raise InvalidArgument(f"expected an OpenCL array, got {type(value).__name__}")
        self.to_host_count += 1
        if value.size == 0:
            return np.empty(value.shape, value.dtype)
        return value.get(self.allocator.queue)
