"""Checking and converting user inputs against the model's declared input types.

A wrong feed fails here, before any kernel runs, with an error that names the input, what was
given and what the model expects. What is a feed follows onnxruntime's session: a numpy array,
or a (nested) list converted to the declared type; Python scalars, strings and tuples are
refused, and every declared dim is checked, 0 included. One difference is kept on purpose: a
declared scalar refuses a non-scalar feed, which onnxruntime lets through (it cannot tell a
rank-0 shape from none) although the optimizer may have relied on that shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from turnout.api.values import OrtValue, SparseTensor, to_ort_type_string
from turnout.graph.dtypes import ELEM_TYPE_NAMES, elem_type_of, np_dtype, type_string
from turnout.graph.errors import InvalidArgument, ort_invalid_argument
from turnout.graph.ir import ValueInfo

__all__ = ["InputSpec", "ort_invalid_argument", "shape_text"]


def shape_text(shape: tuple[Any, ...] | None) -> str:
    if shape is None:
        return "any shape"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


class InputSpec:
    """One graph input: converts and checks a feed for it."""

    __slots__ = ("_fast", "dtype", "info", "kind", "name", "shape", "type_name")

    def __init__(self, info: ValueInfo) -> None:
        self.name = info.name
        self.info = info
        self.kind = info.kind
        self.dtype = info.dtype
        self.shape = info.shape
        self.type_name = type_string(info.elem_type) if info.elem_type is not None else info.kind
        # what an ndarray feed that needs nothing done must match: (dtype, rank, the declared
        # dims as (index, size)); None when the declaration leaves dtype or rank open
        self._fast: tuple[np.dtype[Any], int, tuple[tuple[int, int], ...]] | None = None
        if self.kind == "tensor" and self.dtype is not None and self.shape is not None:
            fixed = tuple((i, d) for i, d in enumerate(self.shape) if isinstance(d, int))
            self._fast = (self.dtype, len(self.shape), fixed)

    def convert(self, value: Any) -> Any:
        fast = self._fast
        if fast is not None and type(value) is np.ndarray:
            # the usual feed: an array of the declared dtype, rank and dims, taken as it is
            # (the checks below, in a few comparisons: a sub-millisecond model runs per call)
            dt, rank, fixed = fast
            shape = value.shape
            if (value.dtype is dt or value.dtype == dt) and len(shape) == rank:
                for i, d in fixed:
                    if shape[i] != d:
                        break
                else:
                    return value
        if isinstance(value, OrtValue):
            value = value._value
        if self.kind == "tensor":
            return self._tensor(value)
        if self.kind == "sequence":
            return self._sequence(value)
        if self.kind == "map":
            return self._map(value)
        if self.kind == "sparse_tensor" and not isinstance(value, SparseTensor):
            raise InvalidArgument(
                f"input {self.name!r}: expected a sparse tensor, got {type(value).__name__}"
            )
        return value

    def _sequence(self, value: Any) -> list[Any]:
        """A list of arrays, each of the declared element type (onnxruntime converts nothing
        here: a list of lists, a scalar or another dtype is refused)."""
        if not isinstance(value, list):
            raise InvalidArgument(
                f"input {self.name!r}: expected a sequence (list), got {type(value).__name__}"
            )
        tp = self.info.type_proto
        elem = tp.sequence_type.elem_type if tp is not None else None
        if elem is None or elem.WhichOneof("value") != "tensor_type":
            return value
        want = elem.tensor_type.elem_type
        for i, item in enumerate(value):
            if isinstance(item, OrtValue):
                item = value[i] = item._value
            if not isinstance(item, np.ndarray):
                raise InvalidArgument(
                    f"CreateSequenceOfTensors: Input is not a tensor\ninput {self.name!r}: "
                    f"element {i} is {type(item).__name__}, not a numpy array"
                )
            got = elem_type_of(item.dtype)
            if want and got != want:
                raise ort_invalid_argument(
                    f"Unexpected input data type. Actual: (seq({type_string(got)})) , expected: "
                    f"(seq({type_string(want)}))",
                    f"input {self.name!r}: element {i} is {type_string(got)}",
                )
        return value

    def _map(self, value: Any) -> dict[Any, Any]:
        """A dict with keys of the declared key type (Python or numpy ints, or str) and values
        converted to the declared value type, as onnxruntime fills its std::map."""
        if not isinstance(value, dict):
            raise InvalidArgument(
                f"input {self.name!r}: expected a map (dict), got {type(value).__name__}"
            )
        tp = self.info.type_proto
        if tp is None:
            return value
        key_code = tp.map_type.key_type
        val_tp = tp.map_type.value_type
        val_code = val_tp.tensor_type.elem_type if val_tp.HasField("tensor_type") else 0
        key_type, key_c = (str, "std::string") if key_code == TensorProto.STRING else (int, "")
        key_c = key_c or f"{ELEM_TYPE_NAMES.get(key_code, 'int64')}_t"
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if not isinstance(k, (int, np.integer, str)) or isinstance(k, bool):
                raise InvalidArgument(
                    f"Key type must be int or string (not {type(k)}) for input '{self.name}'."
                )
            if isinstance(k, str) != (key_type is str):
                raise InvalidArgument(
                    f"Unexpected key type  {type(k)}, it cannot be linked to C type {key_c} "
                    f"for input '{self.name}'."
                )
            out[key_type(k)] = self._map_value(v, val_code)
        return out

    def _map_value(self, v: Any, code: int) -> Any:
        if not code:
            return v
        if code == TensorProto.STRING:
            if not isinstance(v, str):
                raise InvalidArgument(
                    f"Unexpected value type  {type(v)}, it cannot be linked to C type string "
                    f"for input '{self.name}'."
                )
            return v
        dt = np_dtype(code)
        lossy = dt.kind in "iub" and not isinstance(v, (int, np.integer))  # 1.7 as an int64
        if isinstance(v, (str, bytes)) or not np.isscalar(v) or lossy:
            raise InvalidArgument(
                f"Unexpected value type  {type(v)}, it cannot be linked to C type "
                f"{ELEM_TYPE_NAMES[code]} for input '{self.name}'."
            )
        return dt.type(v)

    def _tensor(self, value: Any) -> np.ndarray:
        dt = self.dtype
        if not isinstance(value, np.ndarray):
            if isinstance(value, list):
                value = self._from_list(value)
            elif isinstance(value, SparseTensor):
                value = value.to_dense()
            else:  # onnxruntime refuses Python and numpy scalars, strings and tuples
                raise InvalidArgument(self._not_an_array(value))
        if dt is not None and value.dtype != dt:
            if dt == np.dtype(object) and value.dtype.kind in "US":
                value = value.astype(object)
            elif dt == np.dtype(object) and value.dtype.kind == "V":
                value = self._from_void(value)
            else:
                got = self._type_of(value)
                raise ort_invalid_argument(
                    f"Unexpected input data type. Actual: ({got}) , expected: ({self.type_name})",
                    self._detail(value),
                )
        shape = self.shape
        if shape is not None:
            if value.ndim != len(shape):
                raise ort_invalid_argument(
                    f"Invalid rank for input: {self.name} Got: {value.ndim} Expected: "
                    f"{len(shape)} Please fix either the inputs/outputs or the model.",
                    self._detail(value),
                )
            for got_d, want in zip(value.shape, shape):
                if isinstance(want, int) and got_d != want:  # a declared 0 is checked too
                    raise self._bad_dims(value)
        return value  # type: ignore[no-any-return]

    def _from_void(self, value: np.ndarray) -> np.ndarray:
        """A void (`V4`: raw bytes) array for a string input, as onnxruntime reads it: every
        element's bytes, all `itemsize` of them (NULs kept), decoded as UTF-8."""
        out = np.empty(value.shape, dtype=object)
        flat, size = out.reshape(-1), value.dtype.itemsize
        raw = np.ascontiguousarray(value).view(np.uint8).reshape(-1, size) if size else None
        for i in range(flat.size):
            data = raw[i].tobytes() if raw is not None else b""
            try:
                flat[i] = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InvalidArgument(
                    f"input {self.name!r}: element {i} of the void ({value.dtype.str}) array is "
                    f"not UTF-8 text, which a tensor(string) input needs: {e}"
                ) from e
        return out

    def _type_of(self, value: np.ndarray) -> str:
        try:
            return to_ort_type_string(value)
        except InvalidArgument:  # datetime, timedelta: onnxruntime refuses them too
            raise InvalidArgument(
                f"input {self.name!r}: numpy dtype {value.dtype} has no ONNX element type "
                f"(the model declares {self.type_name})"
            ) from None

    def _detail(self, value: np.ndarray) -> str:
        return (
            f"input {self.name!r}: got {to_ort_type_string(value)} of shape "
            f"{tuple(value.shape)}, the model declares {self.type_name} {shape_text(self.shape)}"
        )

    def _bad_dims(self, value: np.ndarray) -> InvalidArgument:
        assert self.shape is not None
        lines = [
            f" index: {i} Got: {got_d} Expected: {want}"
            for i, (got_d, want) in enumerate(zip(value.shape, self.shape))
            if isinstance(want, int) and got_d != want
        ]
        return ort_invalid_argument(
            f"Got invalid dimensions for input: {self.name} for the following indices\n"
            + "\n".join(lines)
            + "\n Please fix either the inputs/outputs or the model.",
            self._detail(value),
        )

    def _not_an_array(self, value: Any) -> str:
        """onnxruntime's text for a feed that is no array: a RuntimeError there, and
        InvalidArgument (a RuntimeError too) here."""
        if isinstance(value, (str, bytes, tuple)):
            text = (
                "Input must be a list of dictionaries or a single numpy array for input "
                f"'{self.name}'."
            )
        else:
            text = f"Unable to handle object of type {type(value)}"
        return f"{text}\ninput {self.name!r}: expected a numpy array or a list ({self.type_name})"

    def _from_list(self, value: list[Any]) -> np.ndarray:
        """A (nested) list as an array of the declared type, as onnxruntime converts it: numpy's
        conversion (float overflow gives inf), every element's str() for a string input."""
        dt = self.dtype
        try:
            if dt is not None and dt.kind == "O":
                return _STR(np.array(value, dtype=object))  # type: ignore[no-any-return]
            with np.errstate(over="ignore", invalid="ignore"):
                return np.array(value, dtype=dt)
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidArgument(
                f"input {self.name!r}: cannot convert the list to {self.type_name}: {e}"
            ) from e


_STR = np.frompyfunc(str, 1, 1)
