"""Process-wide runtime settings: onnxruntime's "environment" (seed, telemetry, global thread
pools, shared allocators, the default logger callback).

Sessions read these through the functions here; nothing else keeps global state. The seed,
which kernels read, is kept in `turnout.sdk.seed` (kernels import no higher) and re-exported here.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from turnout._version import ORT_API_VERSION
from turnout.api.values import OrtAllocatorType, OrtMemoryInfo
from turnout.graph import errors
from turnout.graph.errors import Fail, InvalidArgument
from turnout.sdk.seed import get_seed, random_state, set_seed

__all__ = [
    "ORT_API_VERSION",
    "ArenaExtendStrategy",
    "OrtArenaCfg",
    "RegisteredAllocator",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "get_seed",
    "global_thread_pool_sizes",
    "logger_callback",
    "random_state",
    "registered_allocators",
    "set_default_logger_callback",
    "set_global_thread_pool_sizes",
    "set_seed",
    "telemetry_enabled",
]


_lock = threading.Lock()

# -- telemetry ---------------------------------------------------------------------------------
# turnout collects and sends nothing. The flag is kept (on by default, as onnxruntime's) so that
# applications that switch it off run, and so that a plugin that reports anything can honour it.
_telemetry = True


def enable_telemetry_events() -> None:
    global _telemetry
    _telemetry = True


def disable_telemetry_events() -> None:
    global _telemetry
    _telemetry = False


def telemetry_enabled() -> bool:
    return _telemetry


# -- global thread pools -----------------------------------------------------------------------
_pool_sizes: tuple[int, int] | None = None


def set_global_thread_pool_sizes(
    intra_op_num_threads: int = 0, inter_op_num_threads: int = 0
) -> None:
    """Size the process-wide thread pools that sessions with `use_per_session_threads = False`
    share (0: the default, one thread per core). As in onnxruntime, they are sized once."""
    global _pool_sizes
    sizes = (int(intra_op_num_threads), int(inter_op_num_threads))
    if min(sizes) < 0:
        raise InvalidArgument(f"thread pool sizes must be >= 0, got {sizes}")
    with _lock:
        if _pool_sizes is not None:
            raise Fail("Global thread pools have already been created, cannot replace them")
        _pool_sizes = sizes


def global_thread_pool_sizes() -> tuple[int, int] | None:
    """(intra-op, inter-op) sizes of the global pools, or None while none were created."""
    return _pool_sizes


# -- logger callback ---------------------------------------------------------------------------
LoggerCallback = Callable[[int, str, str, str, str], None]
_logger_callback: LoggerCallback | None = None


def set_default_logger_callback(callback: LoggerCallback | None, severity: int = 2) -> None:
    """Send turnout's log records to `callback(severity, category, logid, code_location,
    message)`; installing one sets the default severity. None restores the default handler."""
    from turnout.graph import logs

    if severity not in logs.SEVERITY_LEVELS:
        raise InvalidArgument(f"logger severity must be 0-4 (verbose..fatal), got {severity!r}")
    if callback is not None and not callable(callback):
        raise TypeError("set_default_logger_callback(): callback must be callable or None")
    global _logger_callback
    with _lock:
        _logger_callback = callback
        for h in list(logs.logger.handlers):
            if isinstance(h, _CallbackHandler):
                logs.logger.removeHandler(h)
        if callback is not None:
            logs.logger.addHandler(_CallbackHandler(callback))
            logs.set_severity(severity)


def logger_callback() -> LoggerCallback | None:
    return _logger_callback


class _CallbackHandler(logging.Handler):
    """Forwards `turnout` log records to the callback, with onnxruntime's severity numbers."""

    def __init__(self, callback: LoggerCallback) -> None:
        super().__init__()
        self.callback = callback

    def emit(self, record: logging.LogRecord) -> None:
        from turnout.graph.logs import SEVERITY_LEVELS

        severity = max((s for s, lv in SEVERITY_LEVELS.items() if lv <= record.levelno), default=0)
        where = f"{record.pathname}:{record.lineno}"
        self.callback(severity, record.name, "", where, record.getMessage())


# -- shared allocators -------------------------------------------------------------------------
class ArenaExtendStrategy(enum.IntEnum):
    kNextPowerOfTwo = 0
    kSameAsRequested = 1


_ARENA_KEYS = (
    "max_mem",
    "arena_extend_strategy",
    "initial_chunk_size_bytes",
    "max_dead_bytes_per_chunk",
    "initial_growth_chunk_size_bytes",
    "max_power_of_two_extend_bytes",
)


class OrtArenaCfg:
    """Arena settings for a shared allocator: `OrtArenaCfg(max_mem, arena_extend_strategy,
    initial_chunk_size_bytes, max_dead_bytes_per_chunk)` or `OrtArenaCfg({key: value})`.
    -1 (and 0 for `max_mem`) means the default. turnout's CPU memory comes from numpy; the
    settings are recorded and readable, for providers whose allocators have arenas."""

    max_mem = 0
    arena_extend_strategy = -1
    initial_chunk_size_bytes = -1
    max_dead_bytes_per_chunk = -1
    initial_growth_chunk_size_bytes = -1
    max_power_of_two_extend_bytes = -1

    def __init__(self, *args: Any) -> None:
        values = dict.fromkeys(_ARENA_KEYS, -1)
        values["max_mem"] = 0
        if len(args) == 1 and isinstance(args[0], Mapping):
            for key, value in args[0].items():
                if key not in values:
                    raise InvalidArgument(f"Invalid OrtArenaCfg option: {key}")
                values[key] = int(value)
        elif len(args) == 4:
            values.update(zip(_ARENA_KEYS, (int(a) for a in args)))
        else:
            raise TypeError("OrtArenaCfg takes 4 ints or one dict")
        self.max_mem = values["max_mem"]
        self.arena_extend_strategy = values["arena_extend_strategy"]
        self.initial_chunk_size_bytes = values["initial_chunk_size_bytes"]
        self.max_dead_bytes_per_chunk = values["max_dead_bytes_per_chunk"]
        self.initial_growth_chunk_size_bytes = values["initial_growth_chunk_size_bytes"]
        self.max_power_of_two_extend_bytes = values["max_power_of_two_extend_bytes"]

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={getattr(self, k)}" for k in _ARENA_KEYS)
        return f"OrtArenaCfg({body})"


@dataclass(frozen=True)
class RegisteredAllocator:
    """A shared allocator: sessions with `session.use_env_allocators = "1"` use it for
    `memory_info`'s device instead of an allocator of their own."""

    provider: str
    memory_info: OrtMemoryInfo
    provider_options: Mapping[str, str]
    arena_cfg: OrtArenaCfg | None


_allocators: dict[tuple[str, int], RegisteredAllocator] = {}


def _device_of(mem_info: OrtMemoryInfo) -> tuple[str, int]:
    return (mem_info.name.lower(), int(mem_info.device_id))


def create_and_register_allocator(mem_info: OrtMemoryInfo, arena_cfg: OrtArenaCfg | None) -> None:
    """Register a shared CPU allocator (onnxruntime takes only CPU memory infos here)."""
    if not isinstance(mem_info, OrtMemoryInfo):
        raise TypeError("create_and_register_allocator(): expected an OrtMemoryInfo")
    if _device_of(mem_info)[0] != "cpu":
        raise InvalidArgument(
            "create_and_register_allocator takes CPU memory only; use "
            f"create_and_register_allocator_v2 for {mem_info.name!r}"
        )
    _register(RegisteredAllocator("CPUExecutionProvider", mem_info, {}, arena_cfg))


def create_and_register_allocator_v2(
    provider_type: str,
    mem_info: OrtMemoryInfo,
    provider_options: Mapping[str, str],
    arena_cfg: OrtArenaCfg | None,
) -> None:
    """Register a shared allocator of `provider_type` (a provider name or alias)."""
    from turnout.sdk.plugins import registry

    if not isinstance(mem_info, OrtMemoryInfo):
        raise TypeError("create_and_register_allocator_v2(): expected an OrtMemoryInfo")
    factory = registry.find(provider_type)
    if factory is None:
        installed = sorted(f.name for f in registry.all())
        raise errors.NotImplemented(
            f"{provider_type} is not implemented in create_and_register_allocator_v2 "
            f"(installed providers: {installed})"
        )
    options = {str(k): str(v) for k, v in provider_options.items()}
    _register(RegisteredAllocator(factory.name, mem_info, options, arena_cfg))


def _register(entry: RegisteredAllocator) -> None:
    if entry.memory_info.allocator_type == OrtAllocatorType.INVALID:
        raise InvalidArgument("cannot register an allocator of type INVALID")
    with _lock:
        _allocators[_device_of(entry.memory_info)] = entry  # a new one replaces the old


def registered_allocators() -> dict[tuple[str, int], RegisteredAllocator]:
    """The shared allocators by (device name, device id), for sessions that use them."""
    return dict(_allocators)
