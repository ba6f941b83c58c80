"""ExampleDataTransfer: copies between host memory and the provider's device.

turnout inserts a copy step wherever a value crosses from one provider's device to another's, and
calls these methods to do it. This template's device is host memory, so copies are no-ops. A real
accelerator uploads in `_to_device` (host array -> device array), downloads in `_to_host`, and
recognizes its own array type in `is_device_value`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from turnout.provider import DataTransfer, Device

__all__ = ["ExampleDataTransfer"]


class ExampleDataTransfer(DataTransfer):
    def is_device_value(self, value: Any) -> bool:
        return isinstance(value, np.ndarray)

    def _to_device(self, value: Any, device: Device) -> Any:
        return np.asarray(value)

    def _to_host(self, value: Any) -> np.ndarray:
        return np.asarray(value)
