"""SessionOptions and RunOptions with onnxruntime's names and enums."""

from __future__ import annotations

import enum
from typing import Any

from .errors import InvalidArgument

__all__ = [
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
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
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"SessionOptions config entry {key!r} is not set")
        return self._config[key]

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
