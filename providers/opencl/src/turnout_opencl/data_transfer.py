"""OpenCLDataTransfer: numpy <-> pyopencl.array.Array on one session's context.

A value counts as on this device only when it is a pyopencl Array of this provider's context
(each session has its own); an Array of another context is copied through the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl.array as cla

from turnout.errors import InvalidArgument
from turnout.provider import DataTransfer, Device

from .allocator import OpenCLAllocator
from .runtime import CTYPES

__all__ = ["OpenCLDataTransfer"]


class OpenCLDataTransfer(DataTransfer):
    def __init__(self, allocator: OpenCLAllocator) -> None:
        self.allocator = allocator
        self.context = allocator.queue.context
        self.to_device_count = 0
        self.to_host_count = 0

    def is_device_value(self, value: Any) -> bool:
        return isinstance(value, cla.Array) and value.context == self.context

    def _to_device(self, value: Any, device: Device) -> Any:
        if value is None or self.is_device_value(value):
            return value
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
        self.to_device_count += 1
        return self.allocator.upload(value)

    def _to_host(self, value: Any) -> np.ndarray:
        if not isinstance(value, cla.Array):
            if value is None or isinstance(value, np.ndarray):
                return value  # type: ignore[return-value]
            raise InvalidArgument(f"expected an OpenCL array, got {type(value).__name__}")
        self.to_host_count += 1
        if value.size == 0:
            return np.empty(value.shape, value.dtype)
        return value.get(self.allocator.queue)
