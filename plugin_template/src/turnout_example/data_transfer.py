"""ExampleDataTransfer: copies between host memory and the provider's device.

turnout inserts a copy step wherever a value crosses from one provider's device to another's. It
allocates each destination (from the allocator, or a host array) and hands every value one step
needs from the device to `copy_tensors` in one batch; a provider with a stream may only enqueue
the copies there, and turnout waits on an event before the host reads them. This template's
device is host memory, so a copy is `np.copyto`. A real accelerator writes its own buffers in
`_copy_into` (or overrides `copy_tensors` to batch) and declares `batched = True`, and
recognizes its array type in `is_device_value`; `_to_device`/`_to_host` serve one-time uploads
and OrtValues.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from turnout.sdk.ep import DataTransfer, Device

__all__ = ["ExampleDataTransfer"]


class ExampleDataTransfer(DataTransfer):
    batched = True  # it writes buffers turnout allocates (`_copy_into`)

    def is_device_value(self, value: Any) -> bool:
        return isinstance(value, np.ndarray)

    def _copy_into(self, src: Any, dst: Any) -> None:
        np.copyto(dst, np.asarray(src))

    def _to_device(self, value: Any, device: Device) -> Any:
        return np.asarray(value)

    def _to_host(self, value: Any) -> np.ndarray:
        return np.asarray(value)
