"""An `onnx.backend.base.Backend`, so onnx's own backend test suite (and its users) run turnout.

Also `onnxruntime.backend.backend`: `OnnxRuntimeBackend` is the same class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx.helper
from onnx.backend.base import Backend

from turnout.api.backend.backend_rep import OnnxRuntimeBackendRep, TurnoutBackendRep
from turnout.api.options import SessionOptions
from turnout.api.session import InferenceSession, get_available_providers, get_device

__all__ = [
    "InferenceSession",
    "OnnxRuntimeBackend",
    "OnnxRuntimeBackendRep",
    "SessionOptions",
    "TurnoutBackend",
    "TurnoutBackendRep",
    "get_available_providers",
    "get_device",
    "is_compatible",
    "prepare",
    "run",
    "run_model",
    "supports_device",
]


class TurnoutBackend(Backend):
    """onnx backend over turnout's default providers (or `providers=[...]` in kwargs)."""

    allowReleasedOpsetsOnly = True

    @classmethod
    def is_opset_supported(cls, model: onnx.ModelProto) -> tuple[bool, str]:
        """(True, "") when no standard opset the model imports is newer than turnout's onnx
        knows, else (False, why). Other domains are checked when the model loads."""
        row = onnx.helper.VERSION_TABLE[-1]  # (release, IR, ai.onnx, ai.onnx.ml, training)
        known = {"ai.onnx": int(row[2]), "ai.onnx.ml": int(row[3])}
        for opset in model.opset_import:
            domain = opset.domain or "ai.onnx"
            newest = known.get(domain)
            if newest is not None and opset.version > newest:
                return False, f"opset {opset.version} of {domain} is newer than {newest}"
        return True, ""

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
        from turnout.graph.one_node import one_node_model

        model = one_node_model(node, list(inputs), kwargs.pop("opset_version", 21))
        return cls.run_model(model, list(inputs), device, **kwargs)

    run = run_model  # onnxruntime's backend has both names


OnnxRuntimeBackend = TurnoutBackend  # onnxruntime's name
is_compatible = TurnoutBackend.is_compatible
prepare = TurnoutBackend.prepare
run = TurnoutBackend.run_model
run_model = TurnoutBackend.run_model
supports_device = TurnoutBackend.supports_device
