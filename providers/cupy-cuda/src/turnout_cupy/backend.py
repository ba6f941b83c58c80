"""The array backend a session's kernels run on: CuPy on one CUDA device, or numpy as the
*emulated* backend that tests use to check kernel logic on machines without a GPU.

Kernels take the backend and use `be.xp` where they would write `cupy` or `numpy`; the two
modules share the array API the kernels use (ufuncs, matmul, reductions, take, pad...). The few
functions they do not share (erf) are methods here. The emulated backend is never registered as
a provider and never what a user gets: it checks the kernels' logic, not CUDA.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import Device

__all__ = ["Backend", "DeviceChecks", "cupy_backend", "emulated_backend"]


class DeviceChecks:
    """Checks computed on the device and read back once per run: a kernel records a boolean
    device scalar and the error to raise if it is true (an index out of range), goes on with a
    clamped value, and `raise_pending` (called from `on_run_end`, after the stream is
    synchronized) raises the first flagged error. Pending checks belong to the running thread."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _pending(self) -> list[tuple[Any, str]]:
        pending: list[tuple[Any, str]] | None = getattr(self._local, "pending", None)
        if pending is None:
            pending = self._local.pending = []
        return pending

    def flag(self, bad: Any, message: str) -> None:
        """Raise `InvalidArgument(message)` at the end of the run if device scalar `bad`."""
        self._pending().append((bad, message))

    def raise_pending(self) -> None:
        pending = self._pending()
        flagged = [message for bad, message in pending if bool(bad)]
        pending.clear()
        if flagged:
            raise InvalidArgument(flagged[0])


@dataclass
class Backend:
    """One session's array module, device and stream, and its device checks."""

    xp: Any
    device: Device
    emulated: bool
    stream: Any = None
    checks: DeviceChecks = field(default_factory=DeviceChecks)
    launcher: Any = None
    """Tests only: what builds and launches generated kernels in place of CuPy (the host
    build of the CUDA source); None: CuPy, or the member kernels on the emulated backend."""

    def erf(self, x: Any) -> Any:
        if self.emulated:
            return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()
        import cupyx.scipy.special

        return cupyx.scipy.special.erf(x)

    def asarray(self, value: Any, dtype: Any = None) -> Any:
        """A host value (numpy array, scalar, list) as an array of this backend."""
        return self.xp.asarray(value, dtype=dtype)

    def host(self, value: Any) -> np.ndarray:
        """A device array copied to the host (shape-like values kernels must read)."""
        if self.emulated:
            return np.asarray(value)
        return value.get()  # type: ignore[no-any-return]


def cupy_backend(device: Device, stream: Any) -> Backend:
    import cupy

    return Backend(cupy, device, emulated=False, stream=stream)


def emulated_backend() -> Backend:
    """numpy in place of CuPy: for tests of kernel logic only (see the module docstring)."""
    return Backend(np, Device("cpu", 0), emulated=True)
