"""CuPyStream: the session's CUDA stream as turnout's `Stream`, with CUDA events.

Kernels and copies of a session are enqueued on it (a run makes it CuPy's current stream).
Where a value crosses to another provider, turnout records an event here and waits for it: a
CuPy stream waits on the device (`cudaStreamWaitEvent`), the host blocks otherwise.
"""

from __future__ import annotations

from typing import Any

from turnout.sdk.provider import Device, Event, Stream

__all__ = ["CuPyEvent", "CuPyStream"]


class CuPyEvent(Event):
    def __init__(self, event: Any) -> None:
        self.event = event

    def wait(self) -> None:
        self.event.synchronize()


class CuPyStream(Stream):
    def __init__(self, cupy_stream: Any, device: Device) -> None:
        super().__init__(device)
        self.cupy_stream = cupy_stream

    @property
    def handle(self) -> Any:
        """The `cudaStream_t` as an int (CuPy's `Stream.ptr`)."""
        return self.cupy_stream.ptr

    def record(self) -> Event:
        import cupy

        with cupy.cuda.Device(self.device.id):
            event = cupy.cuda.Event(disable_timing=True)
            event.record(self.cupy_stream)
        return CuPyEvent(event)

    def wait_event(self, event: Event) -> None:
        if isinstance(event, CuPyEvent):
            self.cupy_stream.wait_event(event.event)
        else:
            event.wait()

    def synchronize(self) -> None:
        self.cupy_stream.synchronize()
