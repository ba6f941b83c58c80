"""IOBinding: bind inputs and outputs once, run many times (onnxruntime's IO binding API).

On the CPU provider binding avoids re-validating nothing more than the feeds; device providers
(a later issue) keep bound values resident on their device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import InvalidArgument
from .values import OrtValue, _check_device

if TYPE_CHECKING:
    from .options import RunOptions
    from .session import InferenceSession

__all__ = ["IOBinding"]


class IOBinding:
    """Inputs and outputs bound by name for `InferenceSession.run_with_iobinding`."""

    def __init__(self, session: InferenceSession) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: list[str] = []
        self._preallocated: dict[str, OrtValue] = {}
        self._results: list[OrtValue] = []

    def bind_cpu_input(self, name: str, arr: np.ndarray) -> None:
        self._inputs[name] = arr

    def bind_input(
        self,
        name: str,
        device_type: str,
        device_id: int,
        element_type: Any,
        shape: Any,
        buffer_ptr: int,
    ) -> None:
        raise InvalidArgument(
            f"bind_input({name!r}) with a raw buffer pointer is not supported; "
            "use bind_cpu_input or bind_ortvalue_input"
        )

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._inputs[name] = ortvalue._value

    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Any = None,
        buffer_ptr: int | None = None,
    ) -> None:
        _check_device(device_type, device_id)
        if buffer_ptr is not None:
            raise InvalidArgument(f"bind_output({name!r}): raw buffer pointers are not supported")
        self._outputs.append(name)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        self._outputs.append(name)
        self._preallocated[name] = ortvalue

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._preallocated.clear()

    def synchronize_inputs(self) -> None:
        """Nothing to wait for on CPU."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for on CPU."""

    def _run(self, run_options: RunOptions | None) -> None:
        names = self._outputs or [o.name for o in self._session.get_outputs()]
        outs = self._session.run(names, self._inputs, run_options)
        results = []
        for name, value in zip(names, outs):
            target = self._preallocated.get(name)
            if target is not None:
                target.update_inplace(value)
                results.append(target)
            else:
                results.append(OrtValue._wrap(value))
        self._results = results

    def get_outputs(self) -> list[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [
            v._value if not isinstance(v._value, np.ndarray) else v.numpy().copy()
            for v in self._results
        ]
