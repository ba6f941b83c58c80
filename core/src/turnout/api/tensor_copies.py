"""Copies between OrtValues outside a session: onnxruntime's `copy_tensors` and the
`OrtSyncStream` an `OrtEpDevice` hands out for it.

They are part of the façade (IO binding and EP devices use them), not of the compatibility shim
`capi/onnxruntime_pybind11_state.py`, which re-exports them under onnxruntime's native names.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from turnout.api.values import OrtValue
from turnout.graph.errors import InvalidArgument
from turnout.sdk.devices import parse_device, transfer_for
from turnout.sdk.provider import Device, Stream

__all__ = ["OrtSyncStream", "copy_tensors"]


class OrtSyncStream:
    """A provider's stream as `OrtEpDevice.create_sync_stream()` hands it out: pass it to
    `copy_tensors` to enqueue a batch of copies on it. A provider without streams gives one
    with no stream (handle 0), whose copies are synchronous."""

    def __init__(self, stream: Stream | None = None, ep_name: str = "") -> None:
        self._stream = stream
        self._ep_name = ep_name

    def get_handle(self) -> int:
        """An integer naming the native stream (its queue's address), 0 for none."""
        handle = self._stream.handle if self._stream is not None else None
        return int(getattr(handle, "int_ptr", 0) or (id(handle) if handle is not None else 0))

    def __repr__(self) -> str:
        return f"OrtSyncStream({self._ep_name or 'no provider'}, handle={self.get_handle():#x})"


def copy_tensors(
    src: Sequence[OrtValue], dst: Sequence[OrtValue], stream: OrtSyncStream | None = None
) -> None:
    """Copy each tensor of `src` into the matching tensor of `dst`, in place. Shapes and element
    types must match. The pairs that touch one device go to its provider's transfer as one
    batch (`DataTransfer.copy_tensors`), enqueued on `stream` when one is given; the call
    returns once every copy has landed."""
    if len(src) != len(dst):
        raise InvalidArgument(
            f"copy_tensors: {len(src)} sources but {len(dst)} destinations; they must pair up"
        )
    for i, (s, d) in enumerate(zip(src, dst)):
        if s.shape() != d.shape() or s.element_type() != d.element_type():
            raise InvalidArgument(
                f"copy_tensors: pair {i}: source {s.data_type()}{s.shape()} does not match "
                f"destination {d.data_type()}{d.shape()}"
            )
    by_device: dict[str, list[tuple[OrtValue, OrtValue]]] = {}
    for s, d in zip(src, dst):
        if s._device == "cpu" and d._device == "cpu":
            np.copyto(d._tensor("copy_tensors"), s._tensor("copy_tensors"))
            continue
        if s._device not in ("cpu", d._device) and d._device != "cpu":
            s = OrtValue(s.numpy())  # between two devices: through the host
        by_device.setdefault(d._device if d._device != "cpu" else s._device, []).append((s, d))
    native = stream._stream if stream is not None else None
    for device, pairs in by_device.items():
        _copy_batch(parse_device(device), pairs, native)


def _copy_batch(
    device: Device, pairs: list[tuple[OrtValue, OrtValue]], stream: Stream | None
) -> None:
    """One device's pairs: one batched call, or one copy at a time on a contract-1 transfer
    (whose device destinations take a new buffer, since it cannot write into one)."""
    transfer = transfer_for(device.type)
    stream = stream if stream is not None and stream.device.type == device.type else None
    if transfer.batched:
        transfer.copy_tensors([(s._value, d._value) for s, d in pairs], stream)
        if stream is not None:
            stream.record().wait()
        return
    for s, d in pairs:
        if d._device == "cpu":
            np.copyto(d._tensor("copy_tensors"), transfer.to_host(s._value))
        else:
            d._v = transfer.to_device(s._value, device)
