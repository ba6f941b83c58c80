"""Every TensorProto in a model, the one checked way to turn one into a numpy array, and the
host-array helpers that runtime values (`OrtValue`, `SparseTensor`) share.

A model file is untrusted input: a tensor may claim an unknown data type, negative dims, more
bytes than it holds, or data in a file. `decode_tensor` refuses each of these with an
`Fail` that names the tensor, instead of numpy's bare reshape or KeyError, and it never
reads a file (the loader resolves external data, inside the model's folder, before anything
decodes).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, numpy_helper

from turnout.graph.dtypes import elem_type_of, np_dtype
from turnout.graph.errors import Fail

__all__ = [
    "FIXED_WIDTH_TYPES",
    "TYPED_FIELDS",
    "all_tensors",
    "as_host_array",
    "check_tensor",
    "decode_tensor",
    "from_array",
    "native_raw",
    "raw_array",
    "to_array",
    "zeros",
]

# element types whose raw_data is exactly prod(dims) * itemsize bytes (sub-byte and string
# types are packed or variable-length, and numpy_helper checks those itself)
FIXED_WIDTH_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16,
    TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL,
    TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.UINT32, TensorProto.UINT64,
    TensorProto.COMPLEX64, TensorProto.COMPLEX128, TensorProto.BFLOAT16,
})  # fmt: skip

TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)
"""The repeated fields that can hold a tensor's values (`raw_data` is the other way)."""

# the typed repeated field that holds each element type's values when raw_data is not used
_TYPED_FIELD: dict[int, str] = {
    TensorProto.FLOAT: "float_data",
    TensorProto.COMPLEX64: "float_data",
    TensorProto.DOUBLE: "double_data",
    TensorProto.COMPLEX128: "double_data",
    TensorProto.INT64: "int64_data",
    TensorProto.UINT32: "uint64_data",
    TensorProto.UINT64: "uint64_data",
    TensorProto.STRING: "string_data",
}
_PER_ELEMENT: dict[int, int] = {TensorProto.COMPLEX64: 2, TensorProto.COMPLEX128: 2}

# decoded here, without onnx.numpy_helper (whose type table imports ml_dtypes, 0.35-0.45 s):
# raw bytes of numpy's own fixed-width types on a little-endian host, and the typed fields
# that hold their values as they are
_NATIVE_RAW = FIXED_WIDTH_TYPES - {TensorProto.BFLOAT16}
_NATIVE_TYPED: dict[int, tuple[str, type]] = {  # the typed field and its storage type
    TensorProto.FLOAT: ("float_data", np.float32),
    TensorProto.DOUBLE: ("double_data", np.float64),
    TensorProto.INT64: ("int64_data", np.int64),
    TensorProto.INT32: ("int32_data", np.int32),
    TensorProto.INT8: ("int32_data", np.int32),
    TensorProto.UINT8: ("int32_data", np.int32),
    TensorProto.UINT32: ("uint64_data", np.uint64),
    TensorProto.UINT64: ("uint64_data", np.uint64),
}
# held as 16 or 8 bit patterns in int32_data, reinterpreted
_BITS_IN_INT32: dict[int, type] = {
    TensorProto.FLOAT16: np.uint16,
    TensorProto.INT16: np.uint16,
    TensorProto.UINT16: np.uint16,
    TensorProto.BOOL: np.uint8,
}


def all_tensors(model: ModelProto) -> Iterator[TensorProto]:
    """Every TensorProto of `model`: initializers, sparse initializers' values and indices,
    tensor and sparse-tensor attributes, in the main graph, every subgraph and every function."""
    yield from _graph_tensors(model.graph)
    for fn in model.functions:
        for node in fn.node:
            for a in node.attribute:
                yield from _attribute_tensors(a)


def _graph_tensors(g: GraphProto) -> Iterator[TensorProto]:
    yield from g.initializer
    for sp in g.sparse_initializer:
        yield sp.values
        yield sp.indices
    for node in g.node:
        for a in node.attribute:
            yield from _attribute_tensors(a)


def _attribute_tensors(a: AttributeProto) -> Iterator[TensorProto]:
    if a.HasField("t"):
        yield a.t
    yield from a.tensors
    if a.HasField("sparse_tensor"):
        yield a.sparse_tensor.values
        yield a.sparse_tensor.indices
    for sp in a.sparse_tensors:
        yield sp.values
        yield sp.indices
    if a.HasField("g"):
        yield from _graph_tensors(a.g)
    for g in a.graphs:
        yield from _graph_tensors(g)


def check_tensor(t: TensorProto, where: str) -> None:
    """Refuse a tensor whose type, dims or value count cannot be decoded as declared.

    Only metadata is read (cheap for any size). `where` names the model for the message.
    External data must already be resolved: a tensor still pointing at a file is refused.
    """
    name = repr(t.name) if t.name else "(unnamed)"
    if t.data_location == TensorProto.EXTERNAL:
        raise Fail(
            f"{where}: tensor {name} has unresolved external data; load the model from its "
            "file path so it can be read from the model's folder"
        )
    try:
        np_dtype(t.data_type)
    except (KeyError, ValueError):
        raise Fail(f"{where}: tensor {name} has unknown data type {t.data_type}") from None
    if any(d < 0 for d in t.dims):
        raise Fail(f"{where}: tensor {name} has a negative dim in {list(t.dims)}")
    if t.HasField("raw_data"):
        return  # its length is checked where it is decoded: reading it here would copy it
    count = math.prod(t.dims)
    if t.data_type not in FIXED_WIDTH_TYPES and t.data_type not in _TYPED_FIELD:
        return  # packed sub-byte or float8 values: numpy_helper checks their count
    field = _TYPED_FIELD.get(t.data_type, "int32_data")
    held = len(getattr(t, field))
    want = count * _PER_ELEMENT.get(t.data_type, 1)
    if held != want:
        raise Fail(
            f"{where}: tensor {name} of shape {list(t.dims)} needs {want} values in "
            f"{field}, holds {held}"
        )


def decode_tensor(t: TensorProto, where: str) -> np.ndarray[Any, Any]:
    """`t` as a numpy array, after `check_tensor`; any other decoding failure names `t` too."""
    check_tensor(t, where)
    try:
        return to_array(t)
    except Exception as e:  # numpy/onnx decoding errors carry no tensor name
        name = repr(t.name) if t.name else "(unnamed)"
        raise Fail(f"{where}: cannot decode tensor {name}: {e}") from e


def to_array(t: TensorProto) -> np.ndarray[Any, Any]:
    """`numpy_helper.to_array(t)`, decoded here where numpy's own types suffice (no checks:
    `decode_tensor` is the checked way for a model's tensors)."""
    fast = _decode_native(t)
    return fast if fast is not None else numpy_helper.to_array(t)


def from_array(value: np.ndarray[Any, Any], name: str = "") -> TensorProto:
    """`numpy_helper.from_array(value, name)`: the same fields, written here for numpy's own
    fixed-width types on a little-endian host."""
    dt = value.dtype
    if dt.kind not in "biufc" or sys.byteorder != "little" or dt.byteorder == ">":
        return numpy_helper.from_array(value, name)
    t = TensorProto(name=name, data_type=elem_type_of(dt), dims=value.shape)
    t.raw_data = np.ascontiguousarray(value).tobytes()
    return t


def native_raw(t: TensorProto) -> bool:
    """Whether `t`'s raw bytes decode as a numpy type as they are (`raw_array`)."""
    return t.data_type in _NATIVE_RAW and sys.byteorder == "little"


def raw_array(t: TensorProto, raw: bytes) -> np.ndarray[Any, Any]:
    """`t`'s raw bytes, read once by the caller (upb copies them at each read), viewed as its
    array: what `to_array(t)` returns for a `native_raw` tensor."""
    values: np.ndarray[Any, Any] = np.frombuffer(raw, dtype=np_dtype(t.data_type))
    return values.reshape(tuple(t.dims))


def _decode_native(t: TensorProto) -> np.ndarray[Any, Any] | None:
    """`t` decoded as `numpy_helper.to_array` decodes it, where numpy's own types suffice
    (raw data is viewed, not copied, as there); None for the rest."""
    if t.HasField("segment"):
        return None
    code = t.data_type
    dims: tuple[int, ...] = tuple(t.dims)
    if t.HasField("raw_data"):
        return raw_array(t, t.raw_data) if native_raw(t) else None
    if code in _BITS_IN_INT32:
        bits: np.ndarray[Any, Any] = np.array(t.int32_data, np.int32).view(np.uint32)
        return bits.astype(_BITS_IN_INT32[code]).reshape(dims).view(np_dtype(code))
    if code not in _NATIVE_TYPED:
        return None
    field, storage = _NATIVE_TYPED[code]
    values: np.ndarray[Any, Any] = np.asarray(getattr(t, field), dtype=storage)
    return values.astype(np_dtype(code)).reshape(dims)


def as_host_array(obj: Any) -> np.ndarray:
    """C-contiguous array, strings as object arrays of str; no copy when already so."""
    arr = np.asarray(obj)
    if arr.dtype.kind == "U":
        return arr.astype(object)
    if arr.dtype.kind == "S":
        return np.array([b.decode("utf-8") for b in arr.reshape(-1)], object).reshape(arr.shape)
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def zeros(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """Zero-filled array; string tensors are filled with "" (ONNX's zero string)."""
    return np.full(shape, "", object) if dtype.kind == "O" else np.zeros(shape, dtype)
