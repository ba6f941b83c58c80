"""A prepared model of the onnx backend API (`onnxruntime.backend.backend_rep`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.backend.base import BackendRep, namedtupledict

from turnout.api.session import InferenceSession

__all__ = ["OnnxRuntimeBackendRep", "TurnoutBackendRep"]


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


OnnxRuntimeBackendRep = TurnoutBackendRep  # onnxruntime's name
