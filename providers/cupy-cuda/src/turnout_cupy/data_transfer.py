"""CuPyDataTransfer: host <-> device copies through pinned host buffers, and DLPack in.

Copies go through page-locked (pinned) host memory from CuPy's pinned pool, so the DMA engine
copies without an extra staging copy by the driver, on the session's stream. Batched copies
into buffers turnout allocated (`copy_tensors`) write them directly (`_copy_into`). A value
already on the device passes through: a CuPy array of this device, or any object with
`__dlpack__` on a CUDA device (a torch or JAX tensor), taken without a copy. Outputs are CuPy
arrays, which implement `__dlpack__`: `torch.from_dlpack(out)` takes them without a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import DataTransfer, Device, Stream

from .stream import CuPyStream

__all__ = ["DLPACK_CUDA", "CuPyDataTransfer"]

DLPACK_CUDA = 2
"""kDLCUDA in DLPack's device-type enum."""


class CuPyDataTransfer(DataTransfer):
    batched = True

    def __init__(self, device: Device, stream: Any) -> None:
        import cupy

        self._cupy = cupy
        self.device = device
        self.stream = stream
        self.to_device_count = 0
        self.to_host_count = 0

    def is_device_value(self, value: Any) -> bool:
        return isinstance(value, self._cupy.ndarray) and value.device.id == self.device.id

    def _pinned(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        mem = self._cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        return np.frombuffer(mem, dtype, count=nbytes // dtype.itemsize).reshape(shape)

    def _to_device(self, value: Any, device: Device) -> Any:
        cp = self._cupy
        if value is None or self.is_device_value(value):
            return value
        if hasattr(value, "__dlpack_device__") and not isinstance(value, np.ndarray):
            kind, dev = value.__dlpack_device__()
            if int(kind) == DLPACK_CUDA and int(dev) == self.device.id:
                return cp.from_dlpack(value)
        if isinstance(value, cp.ndarray):  # another device: peer copy
            with cp.cuda.Device(self.device.id):
                return value.copy()
        host = np.asarray(value)
        if host.dtype.kind in "OUS" or host.dtype.names:
            raise InvalidArgument(f"the CUDA device holds numeric tensors only, not {host.dtype}")
        self.to_device_count += 1
        staged = self._pinned(host.shape, host.dtype)
        staged[...] = host
        with cp.cuda.Device(self.device.id):
            out = cp.empty(host.shape, host.dtype)
            out.set(staged, stream=self.stream)
        return out

    def copy_tensors(self, pairs: Sequence[tuple[Any, Any]], stream: Stream | None = None) -> None:
        """Copy each pair on `stream` when it is a CuPy stream (the caller records an event on
        it and waits before reading), else on the session's stream, waited for here."""
        ours = isinstance(stream, CuPyStream)
        s = stream.cupy_stream if isinstance(stream, CuPyStream) else self.stream
        for src, dst in pairs:
            self._copy_on(src, dst, s)
        if not ours and s is not None:
            s.synchronize()

    def _copy_into(self, src: Any, dst: Any) -> None:
        self.copy_tensors([(src, dst)])

    def _copy_on(self, src: Any, dst: Any, stream: Any) -> None:
        """One copy into a buffer turnout allocated: host to device, device to host or device
        to device, enqueued on `stream` (a copy into host memory is done when this returns)."""
        cp = self._cupy
        with cp.cuda.Device(self.device.id):
            if isinstance(dst, cp.ndarray):
                if isinstance(src, cp.ndarray):
                    with stream if stream is not None else cp.cuda.Stream.null:
                        dst[...] = src
                else:
                    dst.set(np.ascontiguousarray(src), stream=stream)
                return
            if not isinstance(src, cp.ndarray):
                np.copyto(dst, np.asarray(src))
                return
            np.copyto(dst, cp.ascontiguousarray(src).get(stream=stream))

    def _to_host(self, value: Any) -> np.ndarray:
        if not isinstance(value, self._cupy.ndarray):
            if value is None or isinstance(value, np.ndarray):
                return value  # type: ignore[return-value]
            raise InvalidArgument(f"expected a CuPy array, got {type(value).__name__}")
        self.to_host_count += 1
        with self._cupy.cuda.Device(self.device.id):
            value = self._cupy.ascontiguousarray(value)  # a view (Transpose) copies first
        out = self._pinned(value.shape, value.dtype)
        value.get(stream=self.stream, out=out)  # blocking: synchronizes that stream
        return out
