"""Memory, streams and transfer: a provider's buffers, its queue of device work, and copies.

Each piece is optional: the defaults are host memory (numpy), no stream, and copies that
need none. A device provider's factory makes its allocator and transfer per device
(`ProviderFactory.create_allocator`, `create_data_transfer`), independent of any session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout.graph import errors
from turnout.sdk.ep.device import CPU, Device
from turnout.sdk.ep.flags import check_flag

__all__ = ["COMPLETE", "Allocator", "DataTransfer", "Event", "Stream"]


class Allocator:
    """A provider's buffers on its device. The CPU one hands out numpy arrays.

    turnout allocates through it: `KernelContext.allocate` (a kernel's outputs) and the copy
    steps (the destination of a batched copy) call `empty`, and the plan calls `free` on
    each such value once its last reader has run (a graph output is never freed). An
    allocator that pools sets `pools = True` and implements `_free` to take the buffer back;
    the default leaves it to the garbage collector. A freed value may still share memory
    with a live one (a kernel that returned its input or a view of it), so a pool reuses
    memory only once nothing references it: a pool of Python objects gets a buffer back when
    the last array over it is dropped."""

    device: Device = CPU
    pools: bool = False
    """True for an allocator that takes buffers back (it implements `_free`): only then does
    the plan call `free`, so allocators without a pool cost nothing per value."""

    def __init__(self, device: Device | None = None) -> None:
        if device is not None:
            self.device = device

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return self._empty(tuple(int(s) for s in shape), np.dtype(dtype))

    def free(self, value: Any) -> None:
        """Hand back a value the runtime no longer holds; values this allocator did not make
        (a feed, another provider's array) must be ignored."""
        self._free(value)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_flag(cls, Allocator, "pools", ("_free",))

    def _empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        return np.empty(shape, dtype)

    def _free(self, value: Any) -> None:
        pass


class Event:
    """A point in a stream's work (onnxruntime's notification): `wait()` blocks the host until
    the work enqueued before it is done. This base is always complete: work on a provider
    without streams is done when its call returns."""

    def wait(self) -> None:
        """Block the host until the work before this event is done."""


class Stream:
    """An ordered queue of one provider's device work (onnxruntime's sync stream); optional.

    A provider that has one sets `ExecutionProvider.stream`; its kernels find it in
    `KernelContext.stream` and enqueue on it, and its transfer's `copy_tensors` may enqueue
    copies on it without waiting. Wherever a value crosses to another provider, turnout records
    an event on the stream that made it and, before the consumer runs, waits for it: on the
    consumer's stream (`wait_event`) when the consumer has one, else on the host."""

    def __init__(self, device: Device = CPU) -> None:
        self.device = device

    @property
    def handle(self) -> Any:
        """The native object (an OpenCL command queue), for code that enqueues directly."""
        return None

    def record(self) -> Event:
        """An event that completes once the work enqueued so far on this stream is done."""
        return COMPLETE

    def wait_event(self, event: Event) -> None:
        """Make work enqueued on this stream from now on wait for `event`. The default blocks
        the host; a device that can wait on its own side overrides it."""
        event.wait()

    def synchronize(self) -> None:
        """Block the host until everything enqueued on this stream is done."""


COMPLETE = Event()


class DataTransfer:
    """Copies between host memory and the provider's device (and between its devices)."""

    device: Device = CPU
    batched: bool = False
    """True for a transfer that copies into buffers turnout allocates (it implements
    `copy_tensors` or `_copy_into`): copy steps then allocate each destination from the
    receiving side's allocator and hand a whole batch to one `copy_tensors` call."""

    def __init__(self, device: Device | None = None) -> None:
        if device is not None:
            self.device = device

    def to_device(self, value: Any, device: Device) -> Any:
        return self._to_device(value, device)

    def to_host(self, value: Any) -> np.ndarray:
        return self._to_host(value)

    def is_device_value(self, value: Any) -> bool:
        """True when `value` already lives on this provider's device (no copy needed)."""
        return isinstance(value, np.ndarray)

    def copy_tensors(self, pairs: Sequence[tuple[Any, Any]], stream: Stream | None = None) -> None:
        """Copy each source tensor into its destination (same shape and dtype; each side host
        memory or this provider's device), like onnxruntime's `CopyTensors`. A transfer with a
        stream may only enqueue the copies: the caller records an event on `stream` and waits
        for it before reading a destination. The default copies one pair at a time and
        synchronously (`_copy_into`)."""
        for src, dst in pairs:
            self._copy_into(src, dst)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_flag(cls, DataTransfer, "batched", ("copy_tensors", "_copy_into"))

    def _copy_into(self, src: Any, dst: Any) -> None:
        """One synchronous copy of `src` into `dst`. The default writes host destinations
        only; a device provider overrides it (or `copy_tensors`) to write its own buffers."""
        if not isinstance(dst, np.ndarray):
            raise errors.NotImplemented(
                f"{type(self).__name__} cannot copy into a {type(dst).__name__}: the provider "
                "implements neither copy_tensors nor _copy_into"
            )
        np.copyto(dst, self.to_host(src) if self.is_device_value(src) else np.asarray(src))

    def _to_device(self, value: Any, device: Device) -> Any:
        return value

    def _to_host(self, value: Any) -> np.ndarray:
        return value  # type: ignore[no-any-return]
