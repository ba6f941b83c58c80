"""An `onnx.backend.base.Backend`, so onnx's own backend test suite (and its users) run turnout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, namedtupledict

from .options import SessionOptions
from .session import InferenceSession

__all__ = ["TurnoutBackend", "TurnoutBackendRep", "prepare", "run_model", "supports_device"]


class TurnoutBackendRep(BackendRep):
    """A prepared model: `run(inputs)` takes a dict, or a list in the order of the graph inputs
    that are not initializers (as onnxruntime's backend does)."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        names = [i.name for i in self.session.get_inputs()]  # as onnxruntime: no initializers
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        elif isinstance(inputs, (list, tuple)):
            feeds = dict(zip(names, inputs))
        else:
            feeds = {names[0]: inputs}
        # as onnxruntime's backend: numpy scalars become 0-d arrays (its session refuses them)
        feeds = {k: np.asarray(v) if isinstance(v, np.generic) else v for k, v in feeds.items()}
        outs = self.session.run(None, feeds)
        out_names = [o.name for o in self.session.get_outputs()]
        return namedtupledict("Outputs", out_names)(*outs)


class TurnoutBackend(Backend):
    """onnx backend over turnout's default providers (or `providers=[...]` in kwargs)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")

    @classmethod
    def prepare(
        cls, model: onnx.ModelProto | bytes | str, device: str = "CPU", **kwargs: Any
    ) -> TurnoutBackendRep:
        options = kwargs.pop("sess_options", None) or SessionOptions()
        providers: Sequence[Any] | None = kwargs.pop("providers", None)
        return TurnoutBackendRep(InferenceSession(model, options, providers=providers))

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype[Any], tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...] | None:
        from .testing import one_node_model

        model = one_node_model(node, list(inputs), kwargs.pop("opset_version", 21))
        return cls.run_model(model, list(inputs), device, **kwargs)


prepare = TurnoutBackend.prepare
run_model = TurnoutBackend.run_model
supports_device = TurnoutBackend.supports_device
