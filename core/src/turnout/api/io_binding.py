"""IOBinding: bind inputs and outputs once, run many times (onnxruntime's IO binding API).

Outputs bound to a device stay there, inputs bound as device OrtValues are read in place, and
outputs bound to existing OrtValues are written into them with `copy_tensors` (one batch per
device).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from turnout.api.tensor_copies import copy_tensors
from turnout.api.values import OrtDevice, OrtValue, OrtValueVector, _check_device
from turnout.graph.errors import InvalidArgument

if TYPE_CHECKING:
    from turnout.api.options import RunOptions
    from turnout.api.session import InferenceSession

__all__ = ["IOBinding", "SessionIOBinding"]


class IOBinding:
    """Inputs and outputs bound by name for `InferenceSession.run_with_iobinding`.

    Outputs bound to a device stay there (no copy back to the host); inputs bound as device
    OrtValues are consumed in place by providers on that device.
    """

    def __init__(self, session: InferenceSession) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, str] = {}  # name -> device string
        self._preallocated: dict[str, OrtValue] = {}
        self._results: list[OrtValue] = []

    def _check_input(self, name: str) -> None:
        if name not in self._session._specs:
            raise InvalidArgument(
                f"cannot bind input {name!r}: model inputs are "
                + ", ".join(self._session._input_order)
            )

    def _check_output(self, name: str) -> None:
        if name not in self._session._output_names:
            raise InvalidArgument(
                f"cannot bind output {name!r}: model outputs are "
                + ", ".join(self._session._output_names)
            )

    def bind_cpu_input(self, name: str, arr: np.ndarray) -> None:
        self._check_input(name)
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
        self._check_input(name)
        self._inputs[name] = ortvalue

    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Any = None,
        buffer_ptr: int | None = None,
    ) -> None:
        self._check_output(name)
        device = _check_device(device_type, device_id)
        if buffer_ptr is not None:
            raise InvalidArgument(f"bind_output({name!r}): raw buffer pointers are not supported")
        self._outputs[name] = device

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Write output `name` into `ortvalue` (host or device): the value stays on that device
        and each run copies it in, in one `copy_tensors` batch with the other such outputs."""
        self._check_output(name)
        self._outputs[name] = ortvalue._device
        self._preallocated[name] = ortvalue

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._preallocated.clear()

    def synchronize_inputs(self) -> None:
        """Device providers synchronize in on_run_end; nothing is pending between runs."""

    def synchronize_outputs(self) -> None:
        """Device providers synchronize in on_run_end; nothing is pending between runs."""

    def _run(self, run_options: RunOptions | None) -> None:
        if not self._outputs:
            raise InvalidArgument("run_with_iobinding: no outputs are bound")
        names = list(self._outputs)
        on_device = frozenset(n for n, d in self._outputs.items() if d != "cpu")
        outs = self._session._execute(names, self._inputs, run_options, on_device)
        results = [OrtValue._wrap(v, self._outputs[n]) for n, v in zip(names, outs)]
        filled = [i for i, n in enumerate(names) if n in self._preallocated]
        if filled:
            targets = [self._preallocated[names[i]] for i in filled]
            copy_tensors([results[i] for i in filled], targets)
            for i, target in zip(filled, targets):
                results[i] = target
        self._results = results

    def get_outputs(self) -> list[OrtValue]:
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> OrtValueVector:
        """The outputs of the last run as an OrtValueVector (the same values as get_outputs)."""
        return OrtValueVector(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        out = []
        for v in self._results:
            if v.device_name() != "cpu" or isinstance(v._value, np.ndarray):
                out.append(np.array(v.numpy(), copy=True))
            else:
                out.append(v._value)
        return out


_DEVICE_KINDS = {0: "cpu", 1: "cuda", 2: "fpga", 3: "npu", 4: "dml"}


class SessionIOBinding(IOBinding):
    """onnxruntime's native binding class (`capi._pybind_state.SessionIOBinding`): the same
    binding, with its overloads that take an `OrtDevice`, and `get_outputs()` returning an
    OrtValueVector. `onnxruntime.IOBinding` is the Python wrapper over it; here both share
    one implementation."""

    def __init__(self, session: InferenceSession) -> None:
        super().__init__(session)

    def bind_input(self, name: str, *args: Any) -> None:
        """`bind_input(name, array)` or `bind_input(name, ort_device, element_type, shape,
        buffer_ptr)` (raw pointers are refused, as in IOBinding.bind_input)."""
        if len(args) == 1:
            self.bind_cpu_input(name, args[0])
            return
        device, element_type, shape, ptr = args
        super().bind_input(name, _kind(device), device.device_id(), element_type, shape, ptr)

    def bind_output(self, name: str, *args: Any) -> None:
        """`bind_output(name, ort_device)` or `bind_output(name, ort_device, element_type,
        shape, buffer_ptr)`."""
        device = args[0] if args else OrtDevice(0, 0, 0)
        rest = args[1:]
        ptr = rest[2] if len(rest) == 3 else None
        super().bind_output(name, _kind(device), device.device_id(), buffer_ptr=ptr)

    def get_outputs(self) -> OrtValueVector:  # type: ignore[override]
        return OrtValueVector(self._results)


def _kind(device: Any) -> str:
    if isinstance(device, OrtDevice):
        return _DEVICE_KINDS.get(device.device_type(), "unknown")
    return str(device)
