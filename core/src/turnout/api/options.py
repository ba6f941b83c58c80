"""SessionOptions and RunOptions with onnxruntime's names and enums."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from turnout.engine.options import EngineOptions
from turnout.engine.placement import BUDGET_KEY, PLACEMENT_KEY, budget_seconds, policy_name
from turnout.graph.errors import InvalidArgument
from turnout.graph.limits import LIMIT_KEYS, ResourceLimits, positive_int
from turnout.graph.model import SuppliedData

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

MAX_CONFIG_KEY_LENGTH = 1024  # onnxruntime's limits on config entries (config_options.cc)
MAX_CONFIG_VALUE_LENGTH = 8192


def _config_entry(key: Any, value: Any) -> tuple[str, str]:
    """A session or run config entry as onnxruntime accepts it: any key of 1 to 1024
    characters, any value of at most 8192 (unknown keys are kept, as onnxruntime keeps them)."""
    key, value = str(key), str(value)
    if not 0 < len(key) <= MAX_CONFIG_KEY_LENGTH:
        raise InvalidArgument(
            f"Config key is empty or longer than maximum length {MAX_CONFIG_KEY_LENGTH}"
        )
    if len(value) > MAX_CONFIG_VALUE_LENGTH:
        raise InvalidArgument(
            f"Config value is longer than maximum length: {MAX_CONFIG_VALUE_LENGTH}"
            f" (key {key!r}, {len(value)} characters)"
        )
    return key, value


def _config_lookup(config: Mapping[str, str], key: str, owner: str) -> str:
    """onnxruntime's error, verbatim, for a key that was never set."""
    if key not in config:
        raise InvalidArgument(f"{owner} does not have configuration with key: {key}")
    return config[key]


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
        self._external_initializers: dict[str, Any] = {}
        self._external_files: dict[str, memoryview] = {}
        self._providers: list[tuple[str, dict[str, str]]] = []
        self._ep_policy: Any = None  # OrtExecutionProviderDevicePolicy, or None
        self._ep_delegate: Any = None  # the application's selection delegate, or None
        self._cancel_load = False
        self.use_per_session_threads = True

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

    @property
    def placement(self) -> str:
        """How nodes go to providers: "priority" (the default: the first provider that claims
        a node runs it) or "measured" (where the plan's measured time, copies included, is
        lowest); the session config entry `session.turnout.placement`."""
        return policy_name(self._config)

    @placement.setter
    def placement(self, value: str) -> None:
        self.add_session_config_entry(PLACEMENT_KEY, value)

    def add_session_config_entry(self, key: str, value: str) -> None:
        key, value = _config_entry(key, value)
        if key == "session.fallback" and value not in FALLBACK_POLICIES:
            raise InvalidArgument(f"session.fallback must be one of {FALLBACK_POLICIES}")
        if key in LIMIT_KEYS:
            positive_int(key, value)
        if key == PLACEMENT_KEY:
            policy_name({key: value})
        if key == BUDGET_KEY:
            budget_seconds({key: value})
        self._config[key] = value

    def get_session_config_entry(self, key: str) -> str:
        return _config_lookup(self._config, key, "SessionOptions")

    @property
    def resource_limits(self) -> ResourceLimits:
        """The load-time resource limits, from the `session.turnout.*` config entries."""
        return ResourceLimits.from_config(self._config)

    def engine_options(self) -> EngineOptions:
        """These options as the engine's stages read them (device values as arrays)."""
        from turnout.api.values import OrtValue

        def array(value: Any) -> Any:  # a host copy for external data; a device buffer stays
            return value._value if isinstance(value, OrtValue) else np.asarray(value)

        supplied = None
        if self._external_initializers or self._external_files:
            supplied = SuppliedData(
                {
                    name: value.numpy() if isinstance(value, OrtValue) else np.asarray(value)
                    for name, value in self._external_initializers.items()
                },
                dict(self._external_files),
            )
        return EngineOptions(
            optimization_level=int(self.graph_optimization_level),
            config=dict(self._config),
            intra_op_num_threads=int(self.intra_op_num_threads or 0),
            fallback=self.fallback,
            enable_mem_reuse=bool(self.enable_mem_reuse),
            optimized_model_filepath=str(self.optimized_model_filepath or ""),
            overrides={name: array(value) for name, value in self._initializers.items()},
            supplied=supplied,
            free_dims_by_name=dict(self._free_dims_by_name),
            free_dims_by_denotation=dict(self._free_dims_by_denotation),
            limits=self.resource_limits,
            profile_file_prefix=self.profile_file_prefix if self.enable_profiling else None,
        )

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        self._free_dims_by_name[name] = int(value)

    def add_free_dimension_override_by_denotation(self, denotation: str, value: int) -> None:
        self._free_dims_by_denotation[denotation] = int(value)

    def add_initializer(self, name: str, value: Any) -> None:
        """Replace the model's initializer `name` with `value` (an OrtValue or numpy array)."""
        self._initializers[name] = value

    def add_external_initializers(self, names: list[str], values: list[Any]) -> None:
        """Data for initializers the model stores as external data, by initializer name (the
        model's files for them are not read). OrtValues or numpy arrays, kept by reference."""
        if len(names) != len(values):
            raise InvalidArgument(
                "add_external_initializers: expecting names and ortvalues lists to have equal "
                f"length, got {len(names)} names and {len(values)} values"
            )
        for name, value in zip(names, values):
            self._external_initializers[str(name)] = value

    def add_external_initializers_from_files_in_memory(
        self, names: list[str], buffers: list[Any], lengths: list[int]
    ) -> None:
        """The contents of the model's external-data files, by the file name the model's
        tensors give as their location: those tensors read from here, not from disk. The first
        `length` bytes of each buffer are used (no copy)."""
        if not len(names) == len(buffers) == len(lengths):
            raise InvalidArgument(
                "add_external_initializers_from_files_in_memory: names, buffers and lengths "
                "must have the same length"
            )
        for name, buffer, length in zip(names, buffers, lengths):
            view = memoryview(buffer).cast("B")
            n = int(length)
            if not 0 <= n <= len(view):
                raise InvalidArgument(
                    f"external file {name!r}: length {n} exceeds its buffer of {len(view)} bytes"
                )
            self._external_files[str(name)] = view[:n]

    def add_provider(self, provider_name: str, provider_options: dict[str, str]) -> None:
        """Append a provider that sessions created without a `providers` list will use."""
        self._providers.append(
            (str(provider_name), {str(k): str(v) for k, v in provider_options.items()})
        )

    def has_providers(self) -> bool:
        """Whether `add_provider` configured providers for sessions made with these options."""
        return bool(self._providers)

    def add_provider_for_devices(
        self, ep_devices: Sequence[Any], provider_options: Mapping[str, Any]
    ) -> None:
        """Append the provider of these `get_ep_devices()` entries (all of one provider),
        on its device, with `provider_options` over the device's own options."""
        from turnout.api.ep_devices import specs_for_devices

        self._providers.append(specs_for_devices(ep_devices, provider_options))

    def set_provider_selection_policy(self, policy: Any) -> None:
        """Let a policy choose the providers of sessions created without a provider list."""
        from turnout.api.ep_devices import OrtExecutionProviderDevicePolicy

        try:
            self._ep_policy = OrtExecutionProviderDevicePolicy(policy)
        except ValueError:
            raise InvalidArgument(
                f"unknown provider selection policy {policy!r}; one of "
                f"{[p.name for p in OrtExecutionProviderDevicePolicy]}"
            ) from None
        self._ep_delegate = None

    def set_provider_selection_policy_delegate(self, delegate: Any) -> None:
        """Let `delegate(ep_devices, model_metadata, runtime_metadata, max_selections)` choose
        the providers, as in onnxruntime; it returns a subset of the devices it is given."""
        if not callable(delegate):
            raise InvalidArgument(
                f"provider selection delegate must be callable, not {type(delegate).__name__}"
            )
        self._ep_delegate = delegate
        self._ep_policy = None

    def has_selection_policy(self) -> bool:
        """Whether a policy or delegate chooses providers for sessions given none."""
        return self._ep_policy is not None or self._ep_delegate is not None

    def set_ep_context_data_read_func(self, read_func: Any, max_data_size: int) -> None:
        """Let `read_func(name, buffer)` supply a compiled model's side files (at most
        `max_data_size` bytes each) instead of the model's folder (`turnout.api.ep_context`)."""
        if not callable(read_func):
            raise InvalidArgument("set_ep_context_data_read_func: read_func must be callable")
        self._ep_context_read: tuple[Any, int] | None = (read_func, int(max_data_size))

    def clear_ep_context_data_read_func(self) -> None:
        """Read compiled models' side files from their folder again."""
        self._ep_context_read = None

    def set_load_cancellation_flag(self, value: bool) -> None:
        """Ask a session being created with these options (on another thread, or later) to stop
        loading: it raises ModelLoadCanceled at the next stage boundary."""
        self._cancel_load = bool(value)

    def register_custom_ops_library(self, path: str) -> None:
        """Install the op sets of a Python module, package or wheel at `path` that defines the
        `turnout_custom_ops` hook (onnxruntime loads a native library here). onnxruntime-
        extensions' native library (`onnxruntime_extensions.get_library_path()`) enables
        turnout's own `ai.onnx.contrib` op set (`turnout.providers.extensions`); any other
        native one is refused, saying so. The domains stay known for the whole process."""
        from pathlib import Path

        from turnout.api.ep_library import load_module
        from turnout.providers import extensions
        from turnout.sdk.custom_ops import install

        if extensions.is_extensions_library(path):
            extensions.enable(str(path))
            return
        if Path(path).suffix in {".so", ".dll", ".dylib", ".pyd"}:
            raise InvalidArgument(
                f"{path!r}: custom op libraries are native onnxruntime plugins, which turnout "
                f"cannot load. turnout takes onnxruntime-extensions' library "
                f"(onnxruntime_extensions.get_library_path(); it runs that op set in Python, "
                f"see docs/extensions-ops.md) and Python modules that define a "
                f"turnout_custom_ops hook"
            )
        module = load_module(Path(path), f"custom_ops_{abs(hash(str(path)))}")
        hook = getattr(module, "turnout_custom_ops", None)
        if not callable(hook):
            raise InvalidArgument(f"{path}: the module defines no turnout_custom_ops() hook")
        install(hook() or [], str(path))


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
        self._adapters: list[Any] = []

    def add_active_adapter(self, adapter: Any) -> None:
        """Activate a `LoraAdapter` for runs with these options: its parameters are fed as the
        inputs of their names (see `turnout.api.lora`)."""
        from turnout.api.lora import LoraAdapter

        if not isinstance(adapter, LoraAdapter):
            raise TypeError(
                f"add_active_adapter(): expected a LoraAdapter, got {type(adapter).__name__}"
            )
        self._adapters.append(adapter)

    def add_run_config_entry(self, key: str, value: str) -> None:
        key, value = _config_entry(key, value)
        self._config[key] = value

    def get_run_config_entry(self, key: str) -> str:
        return _config_lookup(self._config, key, "RunOptions")
