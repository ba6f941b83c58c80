"""A prepared model of the onnx backend API (`onnxruntime.backend.backend_rep`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.backend.base import BackendRep, namedtupledict

from turnout.api.session import InferenceSession

__all__ = ["OnnxRuntimeBackendRep", "TurnoutBackendRep"]


class TurnoutBackendRep(BackendRep):
    """A prepared model: `run(inputs)` takes a list in the order of the graph inputs that are not
    initializers, or the one input's value (as onnxruntime's backend does: a dict is the value
    of a model whose one input is a map); otherwise a dict is read as {input name: value}."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        declared = self.session.get_inputs()  # as onnxruntime: no initializers
        names = [i.name for i in declared]
        one_map = len(declared) == 1 and declared[0].type.startswith("map(")
        if isinstance(inputs, dict) and not one_map:  # a dict for a map input is its value
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
