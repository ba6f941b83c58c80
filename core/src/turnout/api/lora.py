"""LoRA adapters in onnxruntime's adapter file format (`.onnx_adapter`).

An adapter is a set of named tensors. `RunOptions.add_active_adapter(adapter)` feeds them to one
run as inputs of those names, as onnxruntime does: a parameter must name a graph input (usually an
initializer the model lets callers override), it takes precedence over a feed of the same name,
and when two active adapters name the same input the one added first wins.

The file is a FlatBuffers buffer with file identifier "TORT" whose root table `Adapter` holds
`format_version:int` (1), `adapter_version:int`, `model_version:int` and
`parameters:[Parameter]`; a `Parameter` holds `name:string`, `dims:[int64]`,
`data_type:int` (ONNX TensorProto codes, 1-20) and `raw_data:[ubyte]` (aligned to 8, little
endian). This module reads and writes that layout with `struct`; nothing here depends on the
flatbuffers package.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from turnout.api.values import OrtValue
from turnout.graph.dtypes import ELEM_TYPE_NAMES, np_dtype
from turnout.graph.errors import Fail, InvalidArgument, NoSuchFile

__all__ = ["AdapterFormat", "LoraAdapter", "read_adapter_bytes", "write_adapter_bytes"]

FILE_IDENTIFIER = b"TORT"
FORMAT_VERSION = 1
# the schema's TensorDataType is ONNX's codes 0-20; onnxruntime takes numeric ones only (no
# string, bool or complex parameters)
SUPPORTED_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 16, 17, 18, 19, 20})
NOT_AN_ADAPTER = "The buffer does not appear to be a valid lora parameter format"

_U16, _U32, _I32 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<i")


# -- reading ------------------------------------------------------------------------------------
class _Table:
    """One FlatBuffers table: field `i` is found through the table's vtable."""

    __slots__ = ("buf", "pos", "vt", "vt_size")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf, self.pos = buf, pos
        self.vt = pos - _I32.unpack_from(buf, pos)[0]
        self.vt_size = _U16.unpack_from(buf, self.vt)[0]

    def _field(self, i: int) -> int:
        at = 4 + 2 * i
        return _U16.unpack_from(self.buf, self.vt + at)[0] if at < self.vt_size else 0

    def int32(self, i: int, default: int = 0) -> int:
        off = self._field(i)
        return int(_I32.unpack_from(self.buf, self.pos + off)[0]) if off else default

    def _target(self, i: int) -> int | None:
        off = self._field(i)
        if not off:
            return None
        at = self.pos + off
        return at + int(_U32.unpack_from(self.buf, at)[0])

    def vector(self, i: int) -> tuple[int, int]:
        """(position of the first element, length); (0, 0) when the field is absent."""
        at = self._target(i)
        if at is None:
            return 0, 0
        return at + 4, int(_U32.unpack_from(self.buf, at)[0])

    def string(self, i: int) -> str:
        start, n = self.vector(i)
        return bytes(self.buf[start : start + n]).decode("utf-8")

    def tables(self, i: int) -> list[_Table]:
        start, n = self.vector(i)
        out = []
        for k in range(n):
            at = start + 4 * k
            out.append(_Table(self.buf, at + int(_U32.unpack_from(self.buf, at)[0])))
        return out


def read_adapter_bytes(
    data: Any,
) -> tuple[int, int, int, dict[str, np.ndarray]]:
    """(format_version, adapter_version, model_version, parameters) of an adapter buffer.

    Parameters are read-only numpy views of `data` (no copy)."""
    buf = memoryview(data).cast("B")
    if len(buf) < 8 or bytes(buf[4:8]) != FILE_IDENTIFIER:
        raise Fail(NOT_AN_ADAPTER)
    try:
        root = _Table(buf, int(_U32.unpack_from(buf, 0)[0]))
        version = root.int32(0)
        params: dict[str, np.ndarray] = {}
        for p in root.tables(3):
            code = p.int32(2)
            if code not in SUPPORTED_TYPES:
                raise Fail(
                    f"Lora Param '{p.string(0)}': data_type '{code}' is not a supported LoRA "
                    "parameter type"
                )
            dtype = np_dtype(code)
            start, n = p.vector(1)
            if not n:  # onnxruntime writes scalars but reads none back
                raise Fail(f"Lora Param '{p.string(0)}': dims is missing or empty")
            dims = [int(d) for d in np.frombuffer(buf, "<i8", n, start)]
            start, nbytes = p.vector(3)
            count = math.prod(dims)
            if count * dtype.itemsize != nbytes:
                raise Fail(
                    f"adapter parameter {p.string(0)!r}: {nbytes} bytes of data for a "
                    f"{ELEM_TYPE_NAMES[code]} tensor of shape {dims}"
                )
            arr = np.frombuffer(buf, dtype.newbyteorder("<"), count, start) if count else None
            if arr is None:
                arr = np.zeros(0, dtype)
            params[p.string(0)] = arr.reshape(dims)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as e:
        raise Fail(f"{NOT_AN_ADAPTER}: {e}") from None
    if version != FORMAT_VERSION:
        raise Fail(f"adapter format version {version} is not supported (this reads version 1)")
    return version, root.int32(1), root.int32(2), params


# -- writing ------------------------------------------------------------------------------------
class _Writer:
    """Builds the buffer front to back: every offset points forward, as FlatBuffers requires."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def align(self, n: int, extra: int = 0) -> None:
        """Pad so that position + extra is a multiple of n."""
        self.buf += b"\0" * (-(len(self.buf) + extra) % n)

    def u32_slot(self) -> int:
        self.align(4)
        at = len(self.buf)
        self.buf += b"\0\0\0\0"
        return at

    def point(self, slot: int, target: int) -> None:
        _U32.pack_into(self.buf, slot, target - slot)

    def table(self, fields: list[tuple[str, int]]) -> tuple[int, list[int]]:
        """A vtable then its table of 4-byte fields ("i" int32 value, "o" offset slot to fill).
        Returns (table position, field positions)."""
        self.align(2)
        vt = len(self.buf)
        self.buf += struct.pack(f"<{2 + len(fields)}H", 4 + 2 * len(fields), 4 + 4 * len(fields),
                                *(4 + 4 * k for k in range(len(fields))))  # fmt: skip
        self.align(4)
        pos = len(self.buf)
        self.buf += _I32.pack(pos - vt)
        at = []
        for _kind, value in fields:
            at.append(len(self.buf))
            self.buf += _I32.pack(value)
        return pos, at

    def vector(self, slot: int, n: int, payload: bytes, element_align: int) -> None:
        self.align(max(4, element_align), extra=4)
        self.point(slot, len(self.buf))
        self.buf += _U32.pack(n) + payload

    def string(self, slot: int, s: str) -> None:
        raw = s.encode("utf-8")
        self.vector(slot, len(raw), raw + b"\0", 4)


def write_adapter_bytes(
    params: Mapping[str, np.ndarray], adapter_version: int = 0, model_version: int = 0
) -> bytes:
    """An adapter buffer that onnxruntime's `AdapterFormat.read_adapter` and `LoraAdapter` read."""
    w = _Writer()
    root_slot = w.u32_slot()
    w.buf += FILE_IDENTIFIER
    root, at = w.table(
        [("i", FORMAT_VERSION), ("i", adapter_version), ("i", model_version), ("o", 0)]
    )
    w.point(root_slot, root)
    items = list(params.items())
    w.vector(at[3], len(items), b"\0" * (4 * len(items)), 4)
    vec = len(w.buf) - 4 * len(items)
    slots = [vec + 4 * k for k in range(len(items))]
    for slot, (name, arr) in zip(slots, items):
        a = arr if arr.flags.c_contiguous else arr.copy()  # (ascontiguousarray makes 0-d 1-d)
        code = _elem_code(name, a)
        table, fat = w.table([("o", 0), ("o", 0), ("i", code), ("o", 0)])
        w.point(slot, table)
        w.string(fat[0], name)
        w.vector(fat[1], a.ndim, np.asarray(a.shape, "<i8").tobytes(), 8)
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        w.vector(fat[3], len(data), data, 8)
    return bytes(w.buf)


def _elem_code(name: str, a: np.ndarray) -> int:
    from turnout.graph.dtypes import elem_type_of

    try:
        code = elem_type_of(a.dtype)
    except (KeyError, ValueError):
        code = 0
    if not 0 < code <= 20 or code == 8:  # written as onnxruntime writes them; read back or not
        raise InvalidArgument(f"adapter parameter {name!r}: {a.dtype} tensors cannot be stored")
    return code


def _host_array(name: str, value: Any) -> np.ndarray:
    if isinstance(value, OrtValue):
        if value.device_name() != "cpu":
            value = value.numpy()
        else:
            value = value._value
    if not isinstance(value, np.ndarray):
        raise InvalidArgument(f"adapter parameter {name!r}: expected a tensor OrtValue")
    return value


def _read_file(path: str | os.PathLike[str]) -> Any:
    """The file's bytes, memory-mapped (read-only) as onnxruntime maps adapter files."""
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise NoSuchFile(f"adapter file {p!r} does not exist") from None


# -- onnxruntime's classes ----------------------------------------------------------------------
class AdapterFormat:
    """Write and read adapter files from Python (onnxruntime.AdapterFormat)."""

    def __init__(self, adapter: Any = None) -> None:
        self.format_version = FORMAT_VERSION
        self.adapter_version = 0
        self.model_version = 0
        self._params: dict[str, np.ndarray] = {}
        if isinstance(adapter, AdapterFormat):
            self.__dict__.update(adapter.__dict__)

    @staticmethod
    def read_adapter(file_path: str | os.PathLike[str]) -> AdapterFormat:
        fmt = AdapterFormat()
        data = _read_file(file_path)
        fmt.format_version, fmt.adapter_version, fmt.model_version, fmt._params = (
            read_adapter_bytes(data)
        )
        return fmt

    def export_adapter(self, file_path: str | os.PathLike[str]) -> None:
        """Write the parameters as an onnxruntime adapter file at `file_path`."""
        data = write_adapter_bytes(self._params, self.adapter_version, self.model_version)
        with open(os.fspath(file_path), "wb") as f:
            f.write(data)

    def get_format_version(self) -> int:
        return self.format_version

    def set_adapter_version(self, adapter_version: int) -> None:
        self.adapter_version = int(adapter_version)

    def get_adapter_version(self) -> int:
        return self.adapter_version

    def set_model_version(self, model_version: int) -> None:
        self.model_version = int(model_version)

    def get_model_version(self) -> int:
        return self.model_version

    def set_parameters(self, params: Mapping[str, Any]) -> None:
        """Parameters to export: name -> OrtValue (a numpy array is taken too)."""
        self._params = {str(k): _host_array(k, v) for k, v in params.items()}

    def get_parameters(self) -> dict[str, OrtValue]:
        """name -> OrtValue; after read_adapter these share the file's memory (read-only)."""
        return {k: OrtValue._wrap(v) for k, v in self._params.items()}

    @property
    def parameters(self) -> dict[str, OrtValue]:
        return self.get_parameters()

    @parameters.setter
    def parameters(self, params: Mapping[str, Any]) -> None:
        self.set_parameters(params)


class LoraAdapter:
    """A loaded adapter to activate per run with `RunOptions.add_active_adapter`."""

    def __init__(self) -> None:
        self._params: dict[str, np.ndarray] = {}
        self._versions = (FORMAT_VERSION, 0, 0)

    def Load(self, file_path: str | os.PathLike[str]) -> None:
        """Memory-map the adapter file and take its parameters."""
        self._take(_read_file(file_path))

    @classmethod
    def create_from_file(cls, file_path: str | os.PathLike[str]) -> LoraAdapter:
        adapter = cls()
        adapter.Load(file_path)
        return adapter

    @classmethod
    def create_from_array(cls, data: Any) -> LoraAdapter:
        """An adapter from the bytes of an adapter file (copied, as onnxruntime copies them)."""
        adapter = cls()
        adapter._take(bytes(memoryview(data).cast("B")))
        return adapter

    def _take(self, data: Any) -> None:
        fmt, adapter_version, model_version, self._params = read_adapter_bytes(data)
        self._versions = (fmt, adapter_version, model_version)

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """name -> read-only array of the adapter's parameters."""
        return dict(self._params)

    @property
    def adapter_version(self) -> int:
        return self._versions[1]

    @property
    def model_version(self) -> int:
        return self._versions[2]

    def __repr__(self) -> str:
        return f"LoraAdapter({len(self._params)} parameters: {', '.join(self._params)})"


def adapter_feeds(adapters: list[LoraAdapter], feed: dict[str, Any]) -> dict[str, Any]:
    """`feed` with the active adapters' parameters: an adapter's parameter takes precedence over
    a feed of the same name, and of two adapters the one activated first wins (as in
    onnxruntime)."""
    merged = dict(feed)
    for adapter in reversed(adapters):
        merged.update(adapter._params)
    return merged
