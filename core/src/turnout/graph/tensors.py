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
from collections.abc import Iterator
from typing import Any

import numpy as np
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, numpy_helper

from turnout.graph.dtypes import np_dtype
from turnout.graph.errors import Fail

__all__ = [
    "FIXED_WIDTH_TYPES",
    "all_tensors",
    "as_host_array",
    "check_tensor",
    "decode_tensor",
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
        return numpy_helper.to_array(t)
    except Exception as e:  # numpy/onnx decoding errors carry no tensor name
        name = repr(t.name) if t.name else "(unnamed)"
        raise Fail(f"{where}: cannot decode tensor {name}: {e}") from e


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
