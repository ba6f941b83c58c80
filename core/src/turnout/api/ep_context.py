"""The compile API's callbacks and its error: EPContext data in and out, initializer locations.

A compiled model keeps each provider's compiled data beside it (`turnout.engine.artifact`:
`<model>.<provider>.ctx`) unless it was embedded. onnxruntime lets the application take that
data instead of the file system, as turnout does here:

- `ModelCompiler.set_ep_context_data_write_func(write_func)`: the compiler calls
  `write_func(name, data)` for each side file instead of writing it; `data` is an
  `OrtEpContextData`, readable only during the call;
- `SessionOptions.set_ep_context_data_read_func(read_func, max_data_size)`: a session loading
  a compiled model calls `read_func(name, buffer)` for each side file instead of reading it;
  the callback allocates the `OrtEpContextDataBuffer` once and writes the data into it. The
  blob is then checked against the checksum the model records, as a file's is.

`ModelCompiler(get_initializer_location_func=...)` asks the application where each initializer
of the compiled model goes: None keeps it in the model, an `OrtExternalInitializerInfo` makes
the model refer to data the application wrote there.

`ModelRequiresCompilation` is raised by a session created with the config entry
`session.disable_model_compile` = "1" for a model that is not compiled while a provider the
caller asked for compiles code (`compatibility_info()` not empty).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from turnout.engine.artifact import CompiledArtifact
from turnout.graph.errors import Fail, InvalidArgument

__all__ = [
    "DISABLE_MODEL_COMPILE_KEY",
    "GetInitializerLocationFunc",
    "ModelRequiresCompilation",
    "OrtEpContextData",
    "OrtEpContextDataBuffer",
    "OrtExternalInitializerInfo",
    "check_compiled",
    "make_get_initializer_location_func_wrapper",
    "read_with",
    "with_reader",
    "write_with",
]

DISABLE_MODEL_COMPILE_KEY = "session.disable_model_compile"


class ModelRequiresCompilation(Exception):
    """A session that may not compile was given a model that needs compiling."""


class OrtEpContextData:
    """A view of one piece of compiled data, valid only while the write callback runs."""

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    @property
    def size(self) -> int:
        return len(self._live())

    def read(self, offset: int = 0, length: int | None = None) -> bytes:
        """`length` bytes from `offset` (to the end when None); read large data in chunks."""
        data = self._live()
        offset = int(offset)
        end = len(data) if length is None else offset + int(length)
        if offset < 0 or end < offset or end > len(data):
            raise InvalidArgument(
                f"OrtEpContextData.read: range [{offset}, {end}) is outside its {len(data)} bytes"
            )
        return data[offset:end]

    def _live(self) -> bytes:
        if self._data is None:
            raise Fail("OrtEpContextData is valid only during its write callback")
        return self._data

    def _close(self) -> None:
        self._data = None


class OrtEpContextDataBuffer:
    """Where a read callback puts one piece of compiled data: `allocate(size)` once (at most
    `max_size` bytes), then `write(data, offset)` as often as needed. Valid only during the
    callback."""

    def __init__(self, max_size: int) -> None:
        self._max = int(max_size)
        self._buf: bytearray | None = None
        self._open = True

    @property
    def max_size(self) -> int:
        return self._max

    @property
    def is_allocated(self) -> bool:
        return self._buf is not None

    @property
    def size(self) -> int:
        return 0 if self._buf is None else len(self._buf)

    def allocate(self, size: int) -> None:
        self._check_open()
        if self._buf is not None:
            raise InvalidArgument("OrtEpContextDataBuffer.allocate may be called once")
        size = int(size)
        if not 0 <= size <= self._max:
            raise InvalidArgument(
                f"OrtEpContextDataBuffer.allocate({size}): more than max_data_size {self._max}"
            )
        self._buf = bytearray(size)

    def write(self, data: Any, offset: int = 0) -> None:
        self._check_open()
        if self._buf is None:
            raise InvalidArgument("OrtEpContextDataBuffer.write before allocate")
        chunk = memoryview(data).cast("B")
        offset = int(offset)
        if offset < 0 or offset + len(chunk) > len(self._buf):
            raise InvalidArgument(
                f"OrtEpContextDataBuffer.write: {len(chunk)} bytes at {offset} do not fit in "
                f"{len(self._buf)}"
            )
        self._buf[offset : offset + len(chunk)] = chunk

    def _check_open(self) -> None:
        if not self._open:
            raise Fail("OrtEpContextDataBuffer is valid only during its read callback")

    def _take(self) -> bytes:
        self._open = False
        return b"" if self._buf is None else bytes(self._buf)


def write_with(write_func: Callable[[str, OrtEpContextData], Any]) -> Callable[[str, bytes], None]:
    """The compiler's side-file writer that hands each file to the application instead."""

    def write(name: str, data: bytes) -> None:
        view = OrtEpContextData(data)
        try:
            write_func(name, view)
        except Exception as e:
            raise Fail(f"EPContext data write callback failed for {name!r}: {e}") from e
        finally:
            view._close()

    return write


def read_with(
    read_func: Callable[[str, OrtEpContextDataBuffer], Any], max_size: int
) -> Callable[[str], bytes]:
    """The artifact's side-file reader that asks the application instead."""

    def read(name: str) -> bytes:
        buffer = OrtEpContextDataBuffer(max_size)
        try:
            read_func(name, buffer)
        except Exception as e:
            raise Fail(f"EPContext data read callback failed for {name!r}: {e}") from e
        if not buffer.is_allocated:
            raise Fail(f"EPContext data read callback did not allocate the buffer of {name!r}")
        return buffer._take()

    return read


def with_reader(artifact: CompiledArtifact | None, sess_options: Any) -> CompiledArtifact | None:
    """The artifact reading its side files through the options' read callback, if set."""
    registered = getattr(sess_options, "_ep_context_read", None)
    if artifact is None or registered is None:
        return artifact
    return replace(artifact, read_data=read_with(*registered))


@dataclass(frozen=True)
class OrtExternalInitializerInfo:
    """Where an initializer's data lies in a file: its path (relative to the model), the
    byte offset and the byte size."""

    filepath: str
    file_offset: int
    byte_size: int


GetInitializerLocationFunc = Callable[
    [str, Any, "OrtExternalInitializerInfo | None"], "OrtExternalInitializerInfo | None"
]


def make_get_initializer_location_func_wrapper(
    get_initializer_location_func: GetInitializerLocationFunc,
) -> GetInitializerLocationFunc:
    """The user's initializer-location function as the compiler calls it: the value arrives
    as an `OrtValue`, and what it returns is checked to be an `OrtExternalInitializerInfo` or
    None (its own `external_info` argument may be returned as is)."""
    from turnout.api.values import OrtValue

    def wrapper(
        name: str, value: Any, external_info: OrtExternalInitializerInfo | None
    ) -> OrtExternalInitializerInfo | None:
        ort_value = value if isinstance(value, OrtValue) else OrtValue.ortvalue_from_numpy(value)
        got = get_initializer_location_func(name, ort_value, external_info)
        if got is not None and not isinstance(got, OrtExternalInitializerInfo):
            raise InvalidArgument(
                f"get_initializer_location_func returned {type(got).__name__} for {name!r}; "
                "expected OrtExternalInitializerInfo or None"
            )
        return got

    return wrapper


def check_compiled(
    config: Mapping[str, str],
    compiled: bool,
    providers: Sequence[Any] | None,
    provider_options: Sequence[dict[str, Any]] | None,
    label: str,
) -> None:
    """Under `session.disable_model_compile` = "1", refuse a model that is not compiled when a
    provider the caller asked for compiles code. The host providers turnout adds for the CPU
    request are not asked for: as onnxruntime's CPU provider, they never make a session fail
    (and a session never waits for their compiler)."""
    if config.get(DISABLE_MODEL_COMPILE_KEY, "0") != "1" or compiled or providers is None:
        return
    from turnout.api.ep_compatibility import provider_for
    from turnout.engine.provider_selection import CPU_PROVIDER
    from turnout.sdk.plugins import registry

    specs = [(p, {}) if isinstance(p, str) else (p[0], dict(p[1])) for p in providers]
    for i, (name, opts) in enumerate(specs):
        if provider_options is not None and i < len(provider_options):
            opts.update(provider_options[i])
        factory = registry.find(name)
        if factory is None or factory.name == CPU_PROVIDER or not registry.probe(factory).ok:
            continue
        if provider_for(factory, opts).compatibility_info():
            raise ModelRequiresCompilation(
                f"{label}: {factory.name} needs to compile this model, and the session "
                f"disables compilation ({DISABLE_MODEL_COMPILE_KEY}=1); compile it first "
                "(ModelCompiler, or turnout compile) and load the compiled model"
            )
