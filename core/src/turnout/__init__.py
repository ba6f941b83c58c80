"""turnout: an ONNX runtime whose execution providers are plugins.

`import turnout as onnxruntime` runs onnxruntime user code unchanged for the API listed here.
"""

__version__ = "0.1.0"

from .errors import (
    EngineError,
    EPFail,
    Fail,
    FallbackError,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoaded,
    NoModel,
    NoSuchFile,
    NotImplemented,
    RuntimeException,
    TurnoutError,
)
from .hookspecs import hookimpl
from .io_binding import IOBinding
from .logs import set_severity as set_default_logger_severity
from .logs import set_verbosity as set_default_logger_verbosity
from .options import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)
from .plugins import register_provider
from .session import (
    InferenceSession,
    ModelMetadata,
    NodeArg,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    get_version_string,
)
from .values import OrtDevice, OrtMemoryInfo, OrtValue, SparseTensor

__all__ = [
    "EPFail",
    "EngineError",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "FallbackError",
    "GraphOptimizationLevel",
    "IOBinding",
    "InferenceSession",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "ModelLoaded",
    "ModelMetadata",
    "NoModel",
    "NoSuchFile",
    "NodeArg",
    "NotImplemented",
    "OrtDevice",
    "OrtMemoryInfo",
    "OrtValue",
    "RunOptions",
    "RuntimeException",
    "SessionOptions",
    "SparseTensor",
    "TurnoutError",
    "__version__",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_device",
    "get_version_string",
    "hookimpl",
    "register_provider",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
]
