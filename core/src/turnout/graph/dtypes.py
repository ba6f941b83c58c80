"""ONNX element types <-> numpy dtypes (ml_dtypes for the exotic ones) and ORT type strings.

numpy has no bfloat16, float8, int4/uint4, int2/uint2 or float4; `ml_dtypes` provides them and the
onnx package already maps TensorProto types onto those dtypes, so this module is the one place
that knows the mapping in both directions.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from onnx import TensorProto, TypeProto

from turnout.graph.errors import InvalidArgument

__all__ = [
    "ELEM_TYPE_NAMES",
    "np_dtype",
    "elem_type_of",
    "type_string",
    "value_type_string",
    "FLOAT_TYPES",
    "INT_TYPES",
]

T = TensorProto
_NP: dict[int, np.dtype[Any]] = {
    T.FLOAT: np.dtype(np.float32),
    T.UINT8: np.dtype(np.uint8),
    T.INT8: np.dtype(np.int8),
    T.UINT16: np.dtype(np.uint16),
    T.INT16: np.dtype(np.int16),
    T.INT32: np.dtype(np.int32),
    T.INT64: np.dtype(np.int64),
    T.STRING: np.dtype(object),
    T.BOOL: np.dtype(np.bool_),
    T.FLOAT16: np.dtype(np.float16),
    T.DOUBLE: np.dtype(np.float64),
    T.UINT32: np.dtype(np.uint32),
    T.UINT64: np.dtype(np.uint64),
    T.COMPLEX64: np.dtype(np.complex64),
    T.COMPLEX128: np.dtype(np.complex128),
}
"""The element types numpy has itself."""

# element type name -> its ml_dtypes name: read only when a model uses one (importing
# ml_dtypes costs 0.35-0.45 s, see turnout._deferred_imports)
_ML_DTYPES = {
    "BFLOAT16": "bfloat16",
    "FLOAT8E4M3FN": "float8_e4m3fn",
    "FLOAT8E4M3FNUZ": "float8_e4m3fnuz",
    "FLOAT8E5M2": "float8_e5m2",
    "FLOAT8E5M2FNUZ": "float8_e5m2fnuz",
    "UINT4": "uint4",
    "INT4": "int4",
    "FLOAT4E2M1": "float4_e2m1fn",
    "FLOAT8E8M0": "float8_e8m0fnu",
    "UINT2": "uint2",
    "INT2": "int2",
    "FLOAT6E2M3": "float6_e2m3fn",
    "FLOAT6E3M2": "float6_e3m2fn",
}
_EXOTIC_CODES = {getattr(T, name): name for name in _ML_DTYPES if hasattr(T, name)}


@functools.cache
def _exotic() -> dict[int, np.dtype[Any]]:
    """The ml_dtypes element types this onnx and this ml_dtypes both know."""
    import ml_dtypes

    return {
        code: np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))
        for code, name in _EXOTIC_CODES.items()
        if hasattr(ml_dtypes, _ML_DTYPES[name])
    }


@functools.cache
def _exotic_codes() -> dict[np.dtype[Any], int]:
    return {dt: code for code, dt in _exotic().items()}


# Names as onnxruntime prints them inside `tensor(...)`.
ELEM_TYPE_NAMES: dict[int, str] = {
    T.FLOAT: "float",
    T.DOUBLE: "double",
    T.FLOAT16: "float16",
    T.BFLOAT16: "bfloat16",
    T.STRING: "string",
    T.BOOL: "bool",
    T.COMPLEX64: "complex64",
    T.COMPLEX128: "complex128",
}
for _code in [*_NP, *_EXOTIC_CODES]:
    ELEM_TYPE_NAMES.setdefault(_code, T.DataType.Name(_code).lower())

_ELEM: dict[np.dtype[Any], int] = {dt: code for code, dt in _NP.items() if code != T.STRING}
_ELEM[np.dtype(object)] = T.STRING

FLOAT_TYPES = frozenset({T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16})
INT_TYPES = frozenset({T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64})


def np_dtype(elem_type: int) -> np.dtype[Any]:
    """numpy dtype for an ONNX element type; raises KeyError for UNDEFINED or unknown codes."""
    found = _NP.get(elem_type)
    return found if found is not None else _exotic()[elem_type]


def elem_type_of(dtype: Any) -> int:
    """ONNX element type for a numpy dtype. Strings of any numpy kind map to STRING, and so do
    void (raw bytes, `V4`) arrays, as onnxruntime reads them; a dtype with no ONNX type (datetime,
    ...) raises InvalidArgument."""
    dt = np.dtype(dtype)
    if dt.kind in "USO":
        return T.STRING
    code = _ELEM.get(dt)
    if code is None and dt.type.__module__.startswith("ml_dtypes"):  # so ml_dtypes is loaded
        code = _exotic_codes().get(dt)
    if code is None and dt.kind == "V":  # raw bytes (ml_dtypes' types are kind V too)
        code = T.STRING
    if code is None:
        raise InvalidArgument(f"no ONNX element type for numpy dtype {dt}")
    return code


def type_string(elem_type: int) -> str:
    """`tensor(float)` style string of a tensor element type, as ORT's NodeArg.type reports it."""
    return f"tensor({ELEM_TYPE_NAMES.get(elem_type, 'undefined')})"


def value_type_string(tp: TypeProto) -> str:
    """ORT-style type string of any ONNX type: tensor, sequence, map, optional, sparse tensor."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return type_string(tp.tensor_type.elem_type)
    if kind == "sparse_tensor_type":
        return f"sparse_tensor({ELEM_TYPE_NAMES.get(tp.sparse_tensor_type.elem_type, 'undefined')})"
    if kind == "sequence_type":
        return f"seq({value_type_string(tp.sequence_type.elem_type)})"
    if kind == "map_type":
        key = ELEM_TYPE_NAMES.get(tp.map_type.key_type, "undefined")
        return f"map({key},{value_type_string(tp.map_type.value_type)})"
    if kind == "optional_type":
        return f"optional({value_type_string(tp.optional_type.elem_type)})"
    return "undefined"
