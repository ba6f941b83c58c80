"""What the engine reads from a session's options, as one plain record.

The engine's stages take an `EngineOptions`, never the onnxruntime façade's `SessionOptions`:
the façade (`turnout.api.options`) builds the record, converting its device values to arrays, so
a change to the façade cannot reach into the engine, and a tool can run the stages without one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.graph.limits import ResourceLimits
from turnout.graph.model import SuppliedData
from turnout.sdk.provider_options import parse_bool

__all__ = ["EngineOptions"]


@dataclass(frozen=True)
class EngineOptions:
    """A session's settings as the engine's stages use them.

    `optimization_level` is onnxruntime's level number (0, 1, 2, 3, 99); `config` the session
    config entries; `overrides` the initializers replaced by the application
    (`add_initializer`), as arrays; `supplied` external data handed over instead of files;
    `free_dims_by_name` / `free_dims_by_denotation` fix symbolic input dims; `fallback` is
    "allow", "warn" or "error"; `profile_file_prefix` is None when profiling is off.
    """

    optimization_level: int = 99
    config: Mapping[str, str] = field(default_factory=dict)
    intra_op_num_threads: int = 0
    fallback: str = "warn"
    enable_mem_reuse: bool = True
    optimized_model_filepath: str = ""
    overrides: Mapping[str, np.ndarray] = field(default_factory=dict)
    supplied: SuppliedData | None = None
    free_dims_by_name: Mapping[str, int] = field(default_factory=dict)
    free_dims_by_denotation: Mapping[str, int] = field(default_factory=dict)
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    profile_file_prefix: str | None = None

    def switch(self, key: str, env: str) -> bool:
        """An on/off session config entry `key`, else the environment variable `env`, else off.

        :raises InvalidArgument: the value is neither 1 nor 0 (or true/false, yes/no, on/off).
        """
        raw = self.config.get(key)
        source = f"session config entry {key}"
        if raw is None:
            raw = os.environ.get(env, "")
            source = f"environment variable {env}"
        value = parse_bool(raw) if raw.strip() else False
        if value is None:
            raise InvalidArgument(f"{source} must be 1 or 0, not {raw!r}")
        return value
