"""turnout: an ONNX runtime whose execution providers are plugins.

`import turnout as onnxruntime` runs onnxruntime user code unchanged for the API listed here.
"""

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    EngineError,
    EPFail,
    Fail,
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
from .io_binding import IOBinding  # noqa: E402
from .logs import set_severity as set_default_logger_severity  # noqa: E402
from .logs import set_verbosity as set_default_logger_verbosity  # noqa: E402
from .options import (  # noqa: E402
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)
from .session import (  # noqa: E402
    InferenceSession,
    ModelMetadata,
    NodeArg,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    get_version_string,
)
from .values import OrtDevice, OrtMemoryInfo, OrtValue, SparseTensor  # noqa: E402

__all__ = [
    "EPFail",
    "EngineError",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
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
    "set_default_logger_severity",
    "set_default_logger_verbosity",
]
