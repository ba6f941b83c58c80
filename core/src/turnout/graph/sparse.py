"""`SparseTensor`: a model's sparse initializers and constants, and a runtime value.

They live in the graph layer because the IR decodes sparse initializers and the SDK's constant
semantics densify them; `turnout.api.values` re-exports them with onnxruntime's value API.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from onnx import SparseTensorProto

from turnout.graph import errors
from turnout.graph.dtypes import ELEM_TYPE_NAMES, elem_type_of
from turnout.graph.errors import InvalidArgument
from turnout.graph.tensors import as_host_array, decode_tensor, zeros

__all__ = [
    "DeviceLike",
    "OrtSparseFormat",
    "SparseBlockSparseView",
    "SparseCooView",
    "SparseCsrView",
    "SparseTensor",
    "set_device_check",
]


class OrtSparseFormat(enum.IntEnum):
    """What `SparseTensor.format` holds (onnxruntime's codes).

    onnxruntime has two sparse classes: the native one (what `run()` returns) reads the format
    as a property, `st.format`; the Python one (`SparseTensor.sparse_coo_from_numpy`,
    `OrtValue.as_sparse_tensor()`) as a method, `st.format()`. turnout's one class answers
    both: the property's value, called, returns itself."""

    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4

    def __call__(self) -> OrtSparseFormat:
        return self


class DeviceLike(Protocol):
    """The `ort_device` argument of the onnxruntime-style factories (an `OrtDevice`)."""

    def device_type(self) -> int: ...

    def device_id(self) -> int: ...


def _host_only(device_type: int, device_id: int) -> None:
    if device_type != 0:
        raise InvalidArgument(f"device type {device_type} (id {device_id}): not the host")


_device_check: Callable[[int, int], None] = _host_only


def set_device_check(check: Callable[[int, int], None]) -> None:
    """Set how the factories check their `ort_device` (type code, id). The graph layer knows
    only the host; `turnout.api.values` installs the check that knows the loaded providers."""
    global _device_check
    _device_check = check


def _check_device(ort_device: DeviceLike) -> None:
    _device_check(ort_device.device_type(), ort_device.device_id())


class SparseCooView:
    """COO indices of a sparse tensor: [NNZ] linear positions or [NNZ, rank] coordinates."""

    __slots__ = ("_indices",)

    def __init__(self, indices: np.ndarray) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        return self._indices


class SparseCsrView:
    """CSR indices of a 2-D sparse tensor: `inner()` column per value, `outer()` row starts."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, inner: np.ndarray, outer: np.ndarray) -> None:
        self._inner, self._outer = inner, outer

    def inner(self) -> np.ndarray:
        return self._inner

    def outer(self) -> np.ndarray:
        return self._outer


class SparseBlockSparseView:
    """Block-sparse indices: int32 [2, num_blocks], the (block row, block column) of each block."""

    __slots__ = ("_indices",)

    def __init__(self, indices: np.ndarray) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        return self._indices


def _readonly(a: np.ndarray) -> np.ndarray:
    v: np.ndarray = a.view()
    v.flags.writeable = False
    return v


class SparseTensor:
    """A sparse tensor in COO (ONNX's form), CSR or block-sparse format, with onnxruntime's API.

    COO: `indices` is int64, [NNZ] (positions in the row-major flattened dense tensor) or
    [NNZ, rank]. CSR (`sparse_csr_from_numpy`): a 2-D tensor's values row by row, `inner` the
    column of each, `outer` where each row starts (rows + 1 entries). Block-sparse
    (`sparse_blocksparse_from_numpy`): values [num_blocks, block_rows, block_cols] placed at the
    block coordinates of int32 indices [2, num_blocks]. `format()` says which; the matching
    `as_*_view()` gives the indices and the others raise, as in onnxruntime. `dtype` and `shape`
    are properties; `values()` and the indices are read-only views.
    """

    def __init__(self, values: Any, indices: Any, dense_shape: Sequence[int]):
        vals = as_host_array(values)
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
        self._format = OrtSparseFormat.ORT_SPARSE_COO
        self._extra: tuple[np.ndarray, ...] = ()

    @staticmethod
    def from_proto(proto: SparseTensorProto) -> SparseTensor:
        where = f"sparse tensor {proto.values.name!r}"
        values = decode_tensor(proto.values, where)
        indices = decode_tensor(proto.indices, where)
        return SparseTensor(values, indices, list(proto.dims))

    @staticmethod
    def from_dense(arr: Any) -> SparseTensor:
        """Linearized-index COO of the non-zero (non-empty for strings) entries of `arr`."""
        a = as_host_array(arr)
        flat = a.reshape(-1)
        idx = np.flatnonzero(flat != ("" if a.dtype == object else 0))
        return SparseTensor(flat[idx], idx, a.shape)

    @staticmethod
    def sparse_coo_from_numpy(
        dense_shape: Sequence[int], values: Any, coo_indices: Any, ort_device: DeviceLike
    ) -> SparseTensor:
        _check_device(ort_device)
        return SparseTensor(values, coo_indices, dense_shape)

    @staticmethod
    def sparse_csr_from_numpy(
        dense_shape: Sequence[int],
        values: Any,
        inner_indices: Any,
        outer_indices: Any,
        ort_device: DeviceLike,
    ) -> SparseTensor:
        """A 2-D CSR sparse tensor (the arrays are kept, not copied, when already int64)."""
        _check_device(ort_device)
        shape = tuple(int(d) for d in dense_shape)
        vals = as_host_array(values)
        inner = np.asarray(inner_indices, dtype=np.int64)
        outer = np.asarray(outer_indices, dtype=np.int64)
        ok = (
            len(shape) == 2
            and vals.ndim == 1
            and inner.shape == vals.shape
            and outer.shape == (shape[0] + 1,)
        )
        if ok and vals.size:
            ok = bool(
                outer[0] == 0
                and outer[-1] == vals.size
                and np.all(np.diff(outer) >= 0)
                and inner.min() >= 0
                and inner.max() < shape[1]
            )
        elif ok:
            ok = not np.any(outer)
        if not ok:
            raise InvalidArgument(
                f"sparse_csr_from_numpy: dense_shape must be 2-D, inner indices one per value "
                f"within the columns and outer indices rows + 1 row starts from 0 to NNZ; got "
                f"shape {list(shape)}, values {vals.shape}, inner {inner.shape}, "
                f"outer {outer.shape}"
            )
        return SparseTensor._of_format(OrtSparseFormat.ORT_SPARSE_CSRC, vals, shape, inner, outer)

    @staticmethod
    def sparse_blocksparse_from_numpy(
        dense_shape: Sequence[int], values: Any, block_indices: Any, ort_device: DeviceLike
    ) -> SparseTensor:
        """A 2-D block-sparse tensor: values [num_blocks, block_rows, block_cols], int32
        indices [2, num_blocks] (block row, block column). onnxruntime builds these only in C++."""
        _check_device(ort_device)
        shape = tuple(int(d) for d in dense_shape)
        vals = as_host_array(values)
        idx = np.asarray(block_indices, dtype=np.int32)
        ok = len(shape) == 2 and vals.ndim == 3 and idx.shape == (2, vals.shape[0])
        if ok and vals.shape[0]:
            bh, bw = vals.shape[1:]
            ok = bool(
                bh > 0
                and bw > 0
                and shape[0] % bh == 0
                and shape[1] % bw == 0
                and idx.min() >= 0
                and np.all(idx[0] < shape[0] // bh)
                and np.all(idx[1] < shape[1] // bw)
            )
        if not ok:
            raise InvalidArgument(
                "sparse_blocksparse_from_numpy: need a 2-D dense_shape divisible into blocks, "
                "values [num_blocks, block_rows, block_cols] and indices [2, num_blocks] in range; "
                f"got shape {list(shape)}, values {vals.shape}, indices {idx.shape}"
            )
        return SparseTensor._of_format(OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE, vals, shape, idx)

    @staticmethod
    def _of_format(
        fmt: OrtSparseFormat, values: np.ndarray, shape: tuple[int, ...], *indices: np.ndarray
    ) -> SparseTensor:
        st = SparseTensor.__new__(SparseTensor)
        st._values, st._shape, st._format, st._extra = values, shape, fmt, indices
        st._indices = indices[0]
        return st

    def to_dense(self) -> np.ndarray:
        out = zeros(self._shape, self.dtype)
        if self._format == OrtSparseFormat.ORT_SPARSE_CSRC:
            inner, outer = self._extra
            rows = np.repeat(np.arange(self._shape[0]), np.diff(outer))
            out[rows, inner] = self._values
        elif self._format == OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE:
            bh, bw = self._values.shape[1:]
            for block, (r, c) in zip(self._values, self._extra[0].T):
                out[r * bh : (r + 1) * bh, c * bw : (c + 1) * bw] = block
        elif self._indices.ndim == 1:
            out.reshape(-1)[self._indices] = self._values
        else:
            out[tuple(self._indices.T)] = self._values
        return out

    def to_coo(self) -> SparseTensor:
        """This tensor in COO form (itself when it is COO), for kernels that take COO only."""
        if self._format == OrtSparseFormat.ORT_SPARSE_COO:
            return self
        return SparseTensor.from_dense(self.to_dense())

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._values.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def format(self) -> OrtSparseFormat:
        """onnxruntime's OrtSparseFormat of this tensor (COO, CSR or block-sparse); `format()`
        gives the same (see `OrtSparseFormat`)."""
        return self._format

    def values(self) -> np.ndarray:
        return _readonly(self._values)

    def indices(self) -> np.ndarray:
        """The COO indices (turnout's shortcut for `as_coo_view().indices()`)."""
        return self.as_coo_view().indices()

    def as_coo_view(self) -> SparseCooView:
        if self._format != OrtSparseFormat.ORT_SPARSE_COO:
            raise RuntimeError("This sparse tensor does not contain COO format")
        return SparseCooView(_readonly(self._indices))

    def as_csrc_view(self) -> SparseCsrView:
        if self._format != OrtSparseFormat.ORT_SPARSE_CSRC:
            raise RuntimeError("This sparse tensor does not contain CSR(C) format")
        return SparseCsrView(_readonly(self._extra[0]), _readonly(self._extra[1]))

    def as_blocksparse_view(self) -> SparseBlockSparseView:
        if self._format != OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE:
            raise RuntimeError("This sparse tensor does not contain BlockSparse format")
        return SparseBlockSparseView(_readonly(self._extra[0]))

    # the native class's names for the views and the block-sparse factory
    get_coo_data = as_coo_view
    get_csrc_data = as_csrc_view
    get_blocksparse_data = as_blocksparse_view
    blocksparse_from_numpy = sparse_blocksparse_from_numpy

    def to_cuda(self, ort_device: DeviceLike) -> SparseTensor:
        raise errors.NotImplemented(
            "SparseTensor.to_cuda: sparse tensors live on the host in turnout (as in "
            "onnxruntime's CPU build, where CUDA is not available)"
        )

    def dense_shape(self) -> list[int]:
        return list(self._shape)

    def data_type(self) -> str:
        return f"sparse_tensor({ELEM_TYPE_NAMES[elem_type_of(self.dtype)]})"

    def device_name(self) -> str:
        return "cpu"

    def __repr__(self) -> str:
        return (
            f"SparseTensor({self.data_type()}, {self._format.name}, shape={self._shape}, "
            f"nnz={self._values.shape[0]})"
        )
