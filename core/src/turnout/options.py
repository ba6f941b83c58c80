"""SessionOptions and RunOptions with onnxruntime's names and enums."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any

from .errors import InvalidArgument

__all__ = [
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
    "ResourceLimits",
    "RunOptions",
    "SessionOptions",
]


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


FALLBACK_POLICIES = ("allow", "warn", "error")


@dataclass(frozen=True)
class ResourceLimits:
    """What loading a model may cost, so a tiny file cannot make session creation take minutes
    or gigabytes. Each is a session config entry `session.turnout.<field name>`.

    - `max_tensor_elements`: a value whose inferred static shape holds more elements is refused
      at load (InvalidGraph naming the node), before anything allocates it.
    - `fold_max_elements`: the largest tensor constant folding may create (bigger ones are
      computed at run time, like any other node).
    - `fold_max_total_bytes`: all tensors that constant folding keeps, together.
    - `shape_data_max_elements`: the largest value onnx's data propagation may read while
      inferring shapes (shape tensors are small; see `turnout.shape_inference`).
    """

    max_tensor_elements: int = 1 << 32
    fold_max_elements: int = 1 << 20
    fold_max_total_bytes: int = 1 << 28
    shape_data_max_elements: int = 4096

    @staticmethod
    def from_config(config: dict[str, str]) -> ResourceLimits:
        values = {}
        for f in fields(ResourceLimits):
            key = f"session.turnout.{f.name}"
            if key in config:
                values[f.name] = _positive_int(key, config[key])
        return ResourceLimits(**values)


def _positive_int(key: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise InvalidArgument(
            f"session config entry {key!r} must be a positive integer, not {value!r}"
        )
    return number


LIMIT_KEYS = frozenset(f"session.turnout.{f.name}" for f in fields(ResourceLimits))


class SessionOptions:
    """Per-session configuration, attribute-compatible with onnxruntime.SessionOptions."""

    def __init__(self) -> None:
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.enable_profiling = False
        self.profile_file_prefix = "turnout_profile"
        self.optimized_model_filepath = ""
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self._fallback = "warn"
        self._config: dict[str, str] = {}
        self._free_dims_by_name: dict[str, int] = {}
        self._free_dims_by_denotation: dict[str, int] = {}
        self._initializers: dict[str, Any] = {}

    @property
    def fallback(self) -> str:
        """Whether nodes may fall back to CPU: "allow", "warn" (default) or "error"."""
        return self._config.get("session.fallback", self._fallback)

    @fallback.setter
    def fallback(self, value: str) -> None:
        if value not in FALLBACK_POLICIES:
            raise InvalidArgument(f"fallback must be one of {FALLBACK_POLICIES}, not {value!r}")
        self._fallback = value
        self._config.pop("session.fallback", None)

    def add_session_config_entry(self, key: str, value: str) -> None:
        if key == "session.fallback" and value not in FALLBACK_POLICIES:
            raise InvalidArgument(f"session.fallback must be one of {FALLBACK_POLICIES}")
        if key in LIMIT_KEYS:
            _positive_int(key, str(value))
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"SessionOptions config entry {key!r} is not set")
        return self._config[key]

    @property
    def resource_limits(self) -> ResourceLimits:
        """The load-time resource limits, from the `session.turnout.*` config entries."""
        return ResourceLimits.from_config(self._config)

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        self._free_dims_by_name[name] = int(value)

    def add_free_dimension_override_by_denotation(self, denotation: str, value: int) -> None:
        self._free_dims_by_denotation[denotation] = int(value)

    def add_initializer(self, name: str, value: Any) -> None:
        """Replace the model's initializer `name` with `value` (an OrtValue or numpy array)."""
        self._initializers[name] = value

    def register_custom_ops_library(self, path: str) -> None:
        raise InvalidArgument(
            f"custom op libraries are native onnxruntime plugins; turnout loads custom ops from "
            f"plugins (turnout_custom_ops hook), not from {path!r}"
        )


class RunOptions:
    """Per-run options; `terminate = True` from another thread cancels a run in progress."""

    def __init__(self) -> None:
        self.logid = ""
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self.synchronize_execution_providers = True
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"RunOptions config entry {key!r} is not set")
        return self._config[key]
