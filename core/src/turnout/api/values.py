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
from onnx import TensorProto

from turnout.api.ort_enums import OrtDeviceMemoryType, OrtDeviceVendorId, OrtMemoryInfoDeviceType
from turnout.graph import sparse
from turnout.graph.dtypes import ELEM_TYPE_NAMES, elem_type_of, np_dtype, type_string
from turnout.graph.errors import InvalidArgument
from turnout.graph.sparse import (
    SparseBlockSparseView,
    SparseCooView,
    SparseCsrView,
    SparseTensor,
)
from turnout.graph.tensors import as_host_array, zeros

__all__ = [
    "OrtAllocatorType",
    "OrtDevice",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtValue",
    "OrtValueVector",
    "SparseBlockSparseView",
    "SparseCooView",
    "SparseCsrView",
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
    def fpga() -> int:
        return 2

    @staticmethod
    def npu() -> int:
        return 3

    cann = npu

    @staticmethod
    def dml() -> int:
        return 4

    @staticmethod
    def webgpu() -> int:
        return 1

    @staticmethod
    def default_memory() -> int:
        return 0

    @staticmethod
    def make(ort_device_name: str, device_id: int, vendor_id: int = -1) -> OrtDevice:
        """An OrtDevice from a name ("cpu", "cuda", "gpu", "npu", "dml", "cann", "webgpu"); the
        vendor defaults to the one the name implies (NVIDIA for "cuda"), as in onnxruntime."""
        codes = {"cpu": 0, "cuda": 1, "gpu": 1, "webgpu": 1, "npu": 3, "cann": 3, "dml": 1}
        if ort_device_name not in codes:
            # onnxruntime raises a bare Exception here; InvalidArgument is one too
            raise InvalidArgument(f"Unsupported device type: {ort_device_name}")
        if vendor_id < 0:
            vendor_id = _NAMED_VENDORS.get(ort_device_name, 0)
        return OrtDevice(codes[ort_device_name], 0, int(device_id), int(vendor_id))

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
    device_mem_type = memory_type  # and the name its Python wrapper uses

    def __repr__(self) -> str:
        return f"OrtDevice(device_type={self._type}, memory_type={self._mem}, device_id={self._id})"


_NAMED_VENDORS = {
    "cuda": OrtDeviceVendorId.NVIDIA,
    "dml": OrtDeviceVendorId.MICROSOFT,
    "cann": OrtDeviceVendorId.HUAWEI,
    "webgpu": OrtDeviceVendorId.NONE,
}


@dataclass(frozen=True)
class OrtMemoryInfo:
    """Where an allocator's memory lives; positional arguments as in onnxruntime."""

    name: str
    allocator_type: OrtAllocatorType = OrtAllocatorType.ORT_ARENA_ALLOCATOR
    device_id: int = 0
    mem_type: OrtMemType = OrtMemType.DEFAULT
    device_mem_type: OrtDeviceMemoryType = OrtDeviceMemoryType.DEFAULT
    device_vendor_id: int = 0
    device_type: OrtMemoryInfoDeviceType = OrtMemoryInfoDeviceType.CPU

    @staticmethod
    def create_v2(
        name: str,
        device_type: OrtMemoryInfoDeviceType,
        vendor_id: int,
        device_id: int,
        mem_type: OrtDeviceMemoryType,
        alignment: int,
        allocator_type: OrtAllocatorType,
    ) -> OrtMemoryInfo:
        """onnxruntime's CreateMemoryInfo_V2 argument order; `alignment` is not kept."""
        return OrtMemoryInfo(
            name,
            OrtAllocatorType(allocator_type),
            int(device_id),
            OrtMemType.DEFAULT,
            OrtDeviceMemoryType(mem_type),
            int(vendor_id),
            OrtMemoryInfoDeviceType(device_type),
        )


CPU_MEMORY_INFO = OrtMemoryInfo("Cpu")


_DEVICE_NAMES = {0: "cpu", 1: "cuda", 2: "fpga", 3: "npu"}


def _check_device(device_type: str, device_id: int = 0) -> str:
    """Device string for (type, id): "cpu", or a device type a loaded provider owns."""
    from turnout.sdk.devices import parse_device

    return str(parse_device(device_type, device_id))


def _check_sparse_device(device_type: int, device_id: int) -> None:
    """SparseTensor's factories accept a device a loaded provider owns, as other values do."""
    _check_device(_DEVICE_NAMES.get(device_type, "unknown"), device_id)


sparse.set_device_check(_check_sparse_device)


def _place(arr: np.ndarray, device: str) -> Any:
    """`arr` on `device` (no copy for cpu)."""
    if device == "cpu":
        return arr
    from turnout.sdk.devices import parse_device, to_device

    return to_device(arr, parse_device(device))


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
        return OrtValue(_place(as_host_array(numpy_obj), device), device)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: Any, onnx_element_type: int) -> OrtValue:
        """Reinterpret `data`'s bytes as an ONNX type numpy lacks (bfloat16 from uint16, ...)."""
        dt = _np_dtype_or_raise(onnx_element_type)
        arr = as_host_array(data)
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
        return OrtValue(_place(zeros(tuple(int(d) for d in shape), dt), device), device)

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
            from turnout.sdk.devices import parse_device, to_host

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
        src = as_host_array(np_arr)
        if src.shape != dst.shape or src.dtype != dst.dtype:
            raise InvalidArgument(
                f"update_inplace: got {src.dtype}{list(src.shape)}, "
                f"the OrtValue holds {dst.dtype}{list(dst.shape)}"
            )
        np.copyto(dst, src)

    # -- DLPack (zero-copy with numpy and any DLPack consumer) -----------------------------------
    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule sharing this tensor's memory (numpy's export for host tensors, the
        device buffer's own for device values that have one)."""
        if self._device != "cpu" and hasattr(self._v, "__dlpack__"):
            return self._v.__dlpack__(stream=stream, **kwargs)
        arr = self._tensor("__dlpack__")
        if not arr.flags.writeable and "max_version" not in kwargs:
            kwargs["max_version"] = (1, 0)  # only versioned DLPack can say "read-only"
        return arr.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device type, device id): (1, 0) for host memory (kDLCPU)."""
        if self._device != "cpu" and hasattr(self._v, "__dlpack_device__"):
            return tuple(self._v.__dlpack_device__())
        return (1, 0)

    def to_dlpack(self) -> Any:
        """A DLPack capsule of this tensor (the native class's name for `__dlpack__()`)."""
        return self.__dlpack__()

    @classmethod
    def from_dlpack(cls, data: Any, /) -> OrtValue:
        """An OrtValue sharing the memory of a DLPack producer (an object with `__dlpack__`, or
        a raw capsule). Host memory only: a device tensor raises InvalidArgument."""
        source = data if hasattr(data, "__dlpack__") else _Capsule(data)
        try:
            arr = np.from_dlpack(source)
        except (BufferError, RuntimeError, TypeError) as e:
            raise InvalidArgument(f"from_dlpack: cannot import this tensor: {e}") from e
        return cls(arr)

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, device={self._device!r})"


class _Capsule:
    """A raw DLPack capsule presented as a producer so numpy can import it (host memory)."""

    __slots__ = ("capsule",)

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


class OrtValueVector:
    """A list of OrtValues, as onnxruntime's `OrtValueVector` (the in/out type of
    `InferenceSession.run_with_ortvaluevector` and `IOBinding.get_outputs_as_ortvaluevector`)."""

    __slots__ = ("_items",)

    def __init__(self, values: Sequence[OrtValue] = ()) -> None:
        self._items: list[OrtValue] = list(values)

    def push_back(self, value: Any) -> None:
        """Append an OrtValue, or a DLPack capsule/producer (imported without a copy)."""
        self._items.append(value if isinstance(value, OrtValue) else OrtValue.from_dlpack(value))

    def push_back_batch(
        self,
        tensors: Sequence[Any],
        data_ptrs: Sequence[int],
        element_types: Sequence[Any],
        shapes: Sequence[Sequence[int]],
        devices: Sequence[Any],
    ) -> None:
        """Append tensors given by host data pointer, element type and shape (no copy); each
        `tensors[i]` is the object owning that memory and is kept alive with the value."""
        import ctypes

        for owner, ptr, etype, shape, device in zip(
            tensors, data_ptrs, element_types, shapes, devices
        ):
            if isinstance(device, OrtDevice) and device.device_type() != 0:
                raise InvalidArgument("push_back_batch: only host (cpu) memory is supported")
            dt = _element_dtype(etype)
            dims = tuple(int(d) for d in shape)
            nbytes = math.prod(dims) * dt.itemsize
            if nbytes:
                raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(int(ptr)))
                arr = raw.view(dt).reshape(dims)
            else:
                arr = np.zeros(dims, dt)
            self._items.append(OrtValue(_Owned(arr, owner).array))

    def reserve(self, n: int) -> None:
        """Nothing to do: a Python list grows as needed."""

    def shrink_to_fit(self) -> None:
        """Nothing to do: a Python list grows as needed."""

    def element_type_at(self, idx: int) -> int:
        return self._items[idx].element_type()

    def dlpack_at(self, idx: int) -> Any:
        return self._items[idx].__dlpack__()

    def to_dlpacks(self, to_tensor: Any = None) -> list[Any]:
        """DLPack capsules of every value, or `to_tensor(capsule)` of each when given."""
        capsules = [v.__dlpack__() for v in self._items]
        return capsules if to_tensor is None else [to_tensor(c) for c in capsules]

    def __getitem__(self, idx: int) -> OrtValue:
        return self._items[idx]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Any:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"OrtValueVector({self._items!r})"


class _Owned:
    """Keeps the owner of foreign memory alive as long as the array viewing it."""

    def __init__(self, array: np.ndarray, owner: Any) -> None:
        import weakref

        self.array = array
        weakref.finalize(array, lambda o: None, owner)  # holds `owner` until `array` goes


def _element_dtype(etype: Any) -> np.dtype[Any]:
    is_code = isinstance(etype, (int, np.integer)) and not isinstance(etype, bool)
    return _np_dtype_or_raise(int(etype)) if is_code else np.dtype(etype)


def _np_dtype_or_raise(code: int) -> np.dtype[Any]:
    try:
        return np_dtype(code)
    except KeyError:
        raise InvalidArgument(f"unsupported ONNX element type {code}") from None
