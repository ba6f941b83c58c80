"""`onnxruntime.capi`: the module paths of onnxruntime's Python API, so imports written for
onnxruntime resolve in turnout."""

from turnout.api.capi import (
    build_and_package_info,
    onnxruntime_inference_collection,
    onnxruntime_pybind11_state,
    onnxruntime_validation,
)

__all__ = [
    "build_and_package_info",
    "onnxruntime_inference_collection",
    "onnxruntime_pybind11_state",
    "onnxruntime_validation",
]
