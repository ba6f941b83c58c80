"""Session options stored in the model, applied as onnxruntime applies them.

onnxruntime reads them only when the environment variable `ORT_LOAD_CONFIG_FROM_MODEL` is "1"
(there is no session config entry for it). The model's metadata key `ort_config` then holds a
JSON object whose `session_options` may set `intra_op_num_threads`, `inter_op_num_threads`,
`execution_mode`, `graph_optimization_level` and `enable_profiling` (integers; other keys are
ignored). The session then runs with default options plus those: the caller's options are not
used, as in onnxruntime, and `get_session_options()` returns what the session runs with.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import onnx

from turnout.api.options import ExecutionMode, GraphOptimizationLevel, SessionOptions
from turnout.graph.errors import Fail, InvalidArgument

__all__ = ["ENV_VAR", "METADATA_KEY", "load_config_from_model", "options_from_model"]

ENV_VAR = "ORT_LOAD_CONFIG_FROM_MODEL"
METADATA_KEY = "ort_config"
SESSION_OPTIONS_KEY = "session_options"


def load_config_from_model() -> bool:
    """Whether `ORT_LOAD_CONFIG_FROM_MODEL` asks for it: "1" yes, unset, empty or "0" no; any
    other value is refused, as onnxruntime refuses it."""
    value = os.environ.get(ENV_VAR, "")
    if value not in ("", "0", "1"):
        raise InvalidArgument(
            f"The only supported values for the environment variable {ENV_VAR} are '0' and "
            f"'1'. The environment variable contained the value: {value}"
        )
    return value == "1"


def _threads(attr: str) -> Callable[[SessionOptions, int], None]:
    def apply(so: SessionOptions, value: int) -> None:
        if value < 0:
            raise InvalidArgument(f"Unsupported value for {attr}: {value}")
        setattr(so, attr, value)

    return apply


def _execution_mode(so: SessionOptions, value: int) -> None:
    if value not in (0, 1):
        raise InvalidArgument(f"Unsupported execution_mode value in ORT config: {value}")
    so.execution_mode = ExecutionMode(value)


def _optimization_level(so: SessionOptions, value: int) -> None:
    try:
        so.graph_optimization_level = GraphOptimizationLevel(value)
    except ValueError:
        raise InvalidArgument(
            f"Unsupported graph_optimization_level value in ORT config: {value}"
        ) from None


def _profiling(so: SessionOptions, value: int) -> None:
    if value not in (0, 1):
        raise InvalidArgument(f"Unsupported value for enable_profiling option: {value}")
    so.enable_profiling = bool(value)


_SETTERS: dict[str, Callable[[SessionOptions, int], None]] = {
    "intra_op_num_threads": _threads("intra_op_num_threads"),
    "inter_op_num_threads": _threads("inter_op_num_threads"),
    "execution_mode": _execution_mode,
    "graph_optimization_level": _optimization_level,
    "enable_profiling": _profiling,
}


def options_from_model(model: onnx.ModelProto, label: str) -> SessionOptions:
    """Default options with the model's `ort_config` session options applied; a bad config
    raises Fail naming the model, as onnxruntime fails the session."""
    try:
        return _options(model)
    except InvalidArgument as e:
        raise Fail(
            "Could not finalize session options while constructing the inference session. "
            f"Error Message: {e} (model {label}, metadata key {METADATA_KEY!r})"
        ) from e


def _options(model: onnx.ModelProto) -> SessionOptions:
    so = SessionOptions()
    raw = next((p.value for p in model.metadata_props if p.key == METADATA_KEY), None)
    if raw is None:
        return so
    try:
        config = json.loads(raw)
    except ValueError as e:
        raise InvalidArgument(
            f"Json stored in the `{METADATA_KEY}` key cannot be parsed. Error message: {e}"
        ) from e
    section = config.get(SESSION_OPTIONS_KEY) if isinstance(config, dict) else None
    for key, value in section.items() if isinstance(section, dict) else ():
        setter = _SETTERS.get(key)
        if setter is None:
            continue  # onnxruntime ignores the options it does not read from models
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(f"{key} option in the model file must be an integer")
        setter(so, value)
    return so
