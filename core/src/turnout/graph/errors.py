"""Exception classes with onnxruntime's names, so `except onnxruntime.capi...InvalidArgument` ports.

Every error raised by turnout derives from `TurnoutError`; the ORT-named classes derive from it
and, where it helps callers, from the matching builtin (ValueError, FileNotFoundError, ...).
"""

from __future__ import annotations

__all__ = [
    "DeviceReset",
    "EPFail",
    "EngineError",
    "FallbackError",
    "Fail",
    "GraphPassError",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "ModelLoadCanceled",
    "ModelLoaded",
    "NoModel",
    "NoSuchFile",
    "NotFound",
    "NotImplemented",
    "ORT_INVALID_ARGUMENT",
    "OptimizationSkippedWarning",
    "RuntimeException",
    "TurnoutError",
    "ort_invalid_argument",
]


class TurnoutError(RuntimeError):
    """Base of every error turnout raises on purpose."""


class Fail(TurnoutError):
    """A generic failure (ORT status FAIL)."""


class InvalidArgument(TurnoutError, ValueError):
    """A caller passed a bad input, option or name (ORT status INVALID_ARGUMENT)."""


class NoSuchFile(TurnoutError, FileNotFoundError):
    """A model or external-data file does not exist (ORT status NO_SUCHFILE)."""


class NoModel(TurnoutError):
    """No model was given (ORT status NO_MODEL)."""


class EngineError(TurnoutError):
    """The execution engine failed (ORT status ENGINE_ERROR)."""


class RuntimeException(TurnoutError):
    """A kernel or the executor failed while running (ORT status RUNTIME_EXCEPTION)."""


class InvalidProtobuf(TurnoutError, ValueError):
    """The bytes are not a parsable ModelProto (ORT status INVALID_PROTOBUF)."""


class ModelLoaded(TurnoutError):
    """The model was already loaded (ORT status MODEL_LOADED)."""


class NotImplemented(TurnoutError, NotImplementedError):
    """No provider implements an op, type or feature (ORT status NOT_IMPLEMENTED)."""


class NotFound(TurnoutError, LookupError):
    """A named thing (an allocator, an adapter, a tuning result) is not there (ORT NOT_FOUND)."""


class DeviceReset(TurnoutError):
    """A device was reset under a running session (ORT status EP_FAIL's device-lost form)."""


class ModelLoadCanceled(TurnoutError):
    """Loading stopped because `SessionOptions.set_load_cancellation_flag(True)` was called."""


class InvalidGraph(TurnoutError, ValueError):
    """The graph is malformed: unknown domain or opset, dangling value, bad attribute."""


class EPFail(TurnoutError):
    """An execution provider failed to probe, create or compile (ORT status EP_FAIL)."""


class FallbackError(EPFail):
    """Fallback policy "error": a requested provider is unavailable, or nodes would fall back
    to the CPU provider. The message lists every such node with each provider's reason."""


class GraphPassError(Fail):
    """A graph optimizer pass crashed: a bug in the pass, not in the model (model defects found
    while optimizing raise their own class). The session warns and runs the model unoptimized."""


class OptimizationSkippedWarning(RuntimeWarning):
    """A session runs its model unoptimized because a graph pass failed. A warning, not a log
    line, so test suites run with `-W error` fail on it instead of hiding it."""


# onnxruntime's C++ errors read "[ONNXRuntimeError] : <code> : <NAME> : <text>"; applications parse
# that text, so errors onnxruntime also raises give it verbatim, turnout's detail on a line after.
ORT_INVALID_ARGUMENT = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "


def ort_invalid_argument(text: str, detail: str = "") -> InvalidArgument:
    """InvalidArgument whose first line is onnxruntime's message `text`; `detail` follows."""
    return InvalidArgument(ORT_INVALID_ARGUMENT + text + (f"\n{detail}" if detail else ""))
