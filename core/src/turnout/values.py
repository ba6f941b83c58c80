"""Runtime values and onnxruntime's value API (`OrtValue`, `OrtDevice`, `SparseTensor`).

Inside turnout a value is plain Python: a tensor is a numpy array (strings: object arrays of str),
a sequence a list, a map a dict, an absent optional None, a sparse tensor a `SparseTensor`.
`OrtValue` wraps one of those with the device it lives on, so code written against
`onnxruntime.OrtValue` ports unchanged. Only the CPU device exists until device providers load.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import SparseTensorProto, TensorProto

from .dtypes import ELEM_TYPE_NAMES, elem_type_of, np_dtype, type_string
from .errors import InvalidArgument
from .tensors import decode_tensor

__all__ = [
    "OrtAllocatorType",
    "OrtDevice",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtValue",
    "SparseTensor",
    "to_ort_type_string",
]


class OrtAllocatorType(enum.IntEnum):
    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtMemType(enum.IntEnum):
    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1  # ORT's alias of CPU_OUTPUT
    DEFAULT = 0


class OrtDevice:
    """A device as (type, memory type, id), with ORT's numeric codes (cpu 0, cuda/gpu 1)."""

    def __init__(self, device_type: int, memory_type: int, device_id: int, vendor_id: int = 0):
        self._type, self._mem, self._id = device_type, memory_type, device_id
        self._vendor = vendor_id

    @staticmethod
    def cpu() -> int:
        return 0

    @staticmethod
    def cuda() -> int:
        return 1

    gpu = cuda

    @staticmethod
    def default_memory() -> int:
        return 0

    def device_type(self) -> int:
        return self._type

    def device_id(self) -> int:
        return self._id

    def memory_type(self) -> int:
        return self._mem

    def device_vendor_id(self) -> int:
        return self._vendor

    mem_type = memory_type  # the names onnxruntime's pybind class uses
    vendor_id = device_vendor_id

    def __repr__(self) -> str:
        return f"OrtDevice(device_type={self._type}, memory_type={self._mem}, device_id={self._id})"


@dataclass(frozen=True)
class OrtMemoryInfo:
    """Where an allocator's memory lives; positional arguments as in onnxruntime."""

    name: str
    allocator_type: OrtAllocatorType = OrtAllocatorType.ORT_ARENA_ALLOCATOR
    device_id: int = 0
    mem_type: OrtMemType = OrtMemType.DEFAULT


_DEVICE_NAMES = {0: "cpu", 1: "cuda", 2: "fpga", 3: "npu"}


def _check_device(device_type: str, device_id: int = 0) -> str:
    """Device string for (type, id): "cpu", or a device type a loaded provider owns."""
    from .devices import parse_device

    return str(parse_device(device_type, device_id))


def _place(arr: np.ndarray, device: str) -> Any:
    """`arr` on `device` (no copy for cpu)."""
    if device == "cpu":
        return arr
    from .devices import parse_device, to_device

    return to_device(arr, parse_device(device))


def _as_host_array(obj: Any) -> np.ndarray:
    """C-contiguous array, strings as object arrays of str; no copy when already so."""
    arr = np.asarray(obj)
    if arr.dtype.kind == "U":
        return arr.astype(object)
    if arr.dtype.kind == "S":
        return np.array([b.decode("utf-8") for b in arr.reshape(-1)], object).reshape(arr.shape)
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


class SparseTensor:
    """A COO sparse tensor as ONNX defines it.

    `indices` is int64, either [NNZ] (positions in the row-major flattened dense tensor) or
    [NNZ, rank] (one coordinate row per value). Method names follow onnxruntime's SparseTensor
    (`values()`, `dense_shape()`, `as_coo_view().indices()`); `dtype` and `shape` are properties.
    """

    format = "coo"

    def __init__(self, values: Any, indices: Any, dense_shape: Sequence[int]):
        vals = _as_host_array(values)
        idx = np.asarray(indices, dtype=np.int64)
        shape = tuple(int(d) for d in dense_shape)
        nnz = vals.shape[0] if vals.ndim == 1 else -1
        if nnz < 0 or idx.shape not in ((nnz,), (nnz, len(shape))):
            raise InvalidArgument(
                f"sparse tensor: values must be 1-D and indices [NNZ] or [NNZ, {len(shape)}]; "
                f"got values {vals.shape}, indices {idx.shape}"
            )
        bound = np.array([math.prod(shape)]) if idx.ndim == 1 else np.array(shape)
        if idx.size and (np.any(idx < 0) or np.any(idx >= bound)):
            raise InvalidArgument(f"sparse tensor: an index is out of range for shape {shape}")
        self._values, self._indices, self._shape = vals, idx, shape

    @staticmethod
    def from_proto(proto: SparseTensorProto) -> SparseTensor:
        where = f"sparse tensor {proto.values.name!r}"
        values = decode_tensor(proto.values, where)
        indices = decode_tensor(proto.indices, where)
        return SparseTensor(values, indices, list(proto.dims))

    @staticmethod
    def from_dense(arr: Any) -> SparseTensor:
        """Linearized-index COO of the non-zero (non-empty for strings) entries of `arr`."""
        a = _as_host_array(arr)
        flat = a.reshape(-1)
        idx = np.flatnonzero(flat != ("" if a.dtype == object else 0))
        return SparseTensor(flat[idx], idx, a.shape)

    @staticmethod
    def sparse_coo_from_numpy(
        dense_shape: Sequence[int], values: Any, coo_indices: Any, ort_device: OrtDevice
    ) -> SparseTensor:
        kind = _DEVICE_NAMES.get(ort_device.device_type(), "unknown")
        _check_device(kind, ort_device.device_id())
        return SparseTensor(values, coo_indices, dense_shape)

    def to_dense(self) -> np.ndarray:
        out = _zeros(self._shape, self.dtype)
        if self._indices.ndim == 1:
            out.reshape(-1)[self._indices] = self._values
        else:
            out[tuple(self._indices.T)] = self._values
        return out

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._values.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    def values(self) -> np.ndarray:
        return self._values

    def indices(self) -> np.ndarray:
        return self._indices

    def as_coo_view(self) -> SparseTensor:
        """ORT returns a view object with `indices()`; this class is its own COO view."""
        return self

    def dense_shape(self) -> list[int]:
        return list(self._shape)

    def data_type(self) -> str:
        return to_ort_type_string(self)

    def device_name(self) -> str:
        return "cpu"

    def __repr__(self) -> str:
        return f"SparseTensor({self.data_type()}, shape={self._shape}, nnz={self._values.shape[0]})"


# Map keys and values are bare Python scalars; maps hold float (ZipMap), not double.
T = TensorProto
_PY_ELEM = {bool: T.BOOL, int: T.INT64, float: T.FLOAT, str: T.STRING, bytes: T.STRING}


def _elem_name(x: Any) -> str:
    """ONNX element name of a Python scalar, numpy scalar or array."""
    code = _PY_ELEM.get(type(x))
    return ELEM_TYPE_NAMES[elem_type_of(np.asarray(x).dtype) if code is None else code]


def to_ort_type_string(value: Any) -> str:
    """ORT type string of any runtime value: `tensor(float)`, `seq(tensor(int64))`, `map(...)`."""
    if isinstance(value, OrtValue):
        value = value._value
    if isinstance(value, np.ndarray):
        return type_string(elem_type_of(value.dtype))
    if isinstance(value, SparseTensor):
        return f"sparse_tensor({_elem_name(value.values())})"
    if isinstance(value, list):
        return f"seq({to_ort_type_string(value[0]) if value else 'undefined'})"
    if isinstance(value, dict):
        if not value:
            return "map(undefined,undefined)"
        key, val = next(iter(value.items()))
        inner = to_ort_type_string(val) if isinstance(val, (np.ndarray, list, dict)) else None
        return f"map({_elem_name(key)},{inner or f'tensor({_elem_name(val)})'})"
    if value is None:
        return "optional(undefined)"
    return f"tensor({_elem_name(value)})"


class OrtValue:
    """A runtime value and its device, with onnxruntime's OrtValue API."""

    __slots__ = ("_device", "_v")

    def __init__(self, value: Any, device: str = "cpu"):
        self._v = value
        self._device = device

    @classmethod
    def _wrap(cls, value: Any, device: str = "cpu") -> OrtValue:
        """Wrap a value the runtime produced, without checks (the session's fast path)."""
        return cls(value, device)

    @property
    def _value(self) -> Any:
        return self._v

    # -- constructors, as in onnxruntime --------------------------------------------------------
    @staticmethod
    def ortvalue_from_numpy(
        numpy_obj: Any, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """Shares memory with `numpy_obj` when it is a C-contiguous array (as ORT does on CPU)."""
        device = _check_device(device_type, device_id)
        return OrtValue(_place(_as_host_array(numpy_obj), device), device)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: Any, onnx_element_type: int) -> OrtValue:
        """Reinterpret `data`'s bytes as an ONNX type numpy lacks (bfloat16 from uint16, ...)."""
        dt = _np_dtype_or_raise(onnx_element_type)
        arr = _as_host_array(data)
        if arr.dtype != dt:
            if arr.dtype.itemsize != dt.itemsize or object in (arr.dtype, dt):
                raise InvalidArgument(
                    f"cannot reinterpret {arr.dtype} data as {ELEM_TYPE_NAMES[onnx_element_type]}: "
                    "element sizes differ"
                )
            arr = arr.view(dt)
        return OrtValue(arr)

    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Sequence[int], element_type: Any, device_type: str = "cpu", device_id: int = 0
    ) -> OrtValue:
        """A zero-filled tensor; `element_type` is a numpy dtype/type or a TensorProto code."""
        device = _check_device(device_type, device_id)
        is_code = isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool)
        dt = _np_dtype_or_raise(int(element_type)) if is_code else np.dtype(element_type)
        return OrtValue(_place(_zeros(tuple(int(d) for d in shape), dt), device), device)

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: SparseTensor) -> OrtValue:
        return OrtValue(sparse_tensor)

    # -- queries --------------------------------------------------------------------------------
    def _tensor(self, what: str) -> np.ndarray:
        if self._device != "cpu":
            raise InvalidArgument(f"{what} needs a host tensor; this OrtValue is on {self._device}")
        if not isinstance(self._v, np.ndarray):
            raise InvalidArgument(f"{what} needs a tensor OrtValue, this one is {self.data_type()}")
        return self._v

    def numpy(self) -> np.ndarray:
        """The tensor as a host array (copied from the device for device values)."""
        if self._device != "cpu":
            from .devices import parse_device, to_host

            return np.asarray(to_host(self._v, parse_device(self._device)))
        return self._tensor("numpy()")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self._tensor("__array__")
        return np.array(arr, dtype=dtype, copy=copy) if dtype is not None or copy else arr

    def shape(self) -> list[int]:
        if isinstance(self._v, SparseTensor):
            return self._v.dense_shape()
        if self._device != "cpu":
            return [int(d) for d in self._v.shape]
        return list(self._tensor("shape()").shape)

    def data_type(self) -> str:
        if self._device != "cpu":
            return type_string(elem_type_of(self._v.dtype))
        return to_ort_type_string(self._v)

    def element_type(self) -> int:
        if isinstance(self._v, SparseTensor):
            return elem_type_of(self._v.dtype)
        if self._device != "cpu":
            return elem_type_of(self._v.dtype)
        return elem_type_of(self._tensor("element_type()").dtype)

    def device_name(self) -> str:
        return self._device.split(":")[0]

    def is_tensor(self) -> bool:
        return isinstance(self._v, np.ndarray) or (self._device != "cpu" and self._v is not None)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._v, list)

    def is_sparse_tensor(self) -> bool:
        return isinstance(self._v, SparseTensor)

    def as_sparse_tensor(self) -> SparseTensor:
        if not isinstance(self._v, SparseTensor):
            raise InvalidArgument(f"this OrtValue is {self.data_type()}, not a sparse tensor")
        return self._v

    def has_value(self) -> bool:
        return self._v is not None

    def data_ptr(self) -> int:
        return int(self._tensor("data_ptr()").ctypes.data)

    def tensor_size_in_bytes(self) -> int:
        return int(self._tensor("tensor_size_in_bytes()").nbytes)

    def update_inplace(self, np_arr: Any) -> None:
        """Copy `np_arr` into this tensor's buffer; shape and dtype must match exactly."""
        dst = self._tensor("update_inplace()")
        src = _as_host_array(np_arr)
        if src.shape != dst.shape or src.dtype != dst.dtype:
            raise InvalidArgument(
                f"update_inplace: got {src.dtype}{list(src.shape)}, "
                f"the OrtValue holds {dst.dtype}{list(dst.shape)}"
            )
        np.copyto(dst, src)

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, device={self._device!r})"


def _np_dtype_or_raise(code: int) -> np.dtype[Any]:
    try:
        return np_dtype(code)
    except KeyError:
        raise InvalidArgument(f"unsupported ONNX element type {code}") from None


def _zeros(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """Zero-filled array; string tensors are filled with "" (ONNX's zero string)."""
    return np.full(shape, "", object) if dtype.kind == "O" else np.zeros(shape, dtype)
