"""The option enums of the quantization API, named and numbered as onnxruntime.quantization's,
so code that passes `QuantType.QInt8` or `CalibrationMethod.MinMax` switches by changing an
import."""

from __future__ import annotations

from enum import Enum
from typing import Any

import numpy as np
from onnx import TensorProto

from turnout.graph import errors
from turnout.graph.errors import InvalidArgument

__all__ = ["CalibrationMethod", "QuantFormat", "QuantType", "quant_range"]


class QuantType(Enum):
    """Element type of quantized weights or activations, numbered as onnxruntime's: 8- and 16-bit
    integers and float8 E4M3FN (4-bit types are weight-only in onnxruntime and refused here)."""

    QInt8 = 0
    QUInt8 = 1
    QFLOAT8E4M3FN = 2
    QInt16 = 3
    QUInt16 = 4
    QInt4 = 5
    QUInt4 = 6

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def from_string(name: str) -> QuantType:
        try:
            return QuantType[name]
        except KeyError:
            raise ValueError(name) from None

    @property
    def tensor_type(self) -> int:
        """The ONNX element type (TensorProto.INT8, UINT8, INT16, UINT16, FLOAT8E4M3FN, ...)."""
        return _TENSOR_TYPES[self.name]

    @property
    def dtype(self) -> Any:
        """The numpy dtype of quantized values (ml_dtypes' float8_e4m3fn for float8)."""
        if self is QuantType.QFLOAT8E4M3FN:
            from ml_dtypes import float8_e4m3fn

            return float8_e4m3fn
        return _INT_DTYPES[self.name]

    @property
    def is_float8(self) -> bool:
        return self is QuantType.QFLOAT8E4M3FN

    @classmethod
    def of(cls, value: object, what: str) -> QuantType:
        """`value` as a QuantType (onnxruntime's enum or a name); 4-bit types are refused."""
        name = getattr(value, "name", value)
        if isinstance(value, cls):
            name = value.name
        if isinstance(name, str) and name in cls.__members__ and name not in ("QInt4", "QUInt4"):
            return cls[name]
        raise errors.NotImplemented(
            f"{what}={value!r}: turnout.tools.quantization supports QuantType.QInt8, QUInt8, "
            f"QInt16, QUInt16 and QFLOAT8E4M3FN"
        )


_TENSOR_TYPES = {
    "QInt8": TensorProto.INT8,
    "QUInt8": TensorProto.UINT8,
    "QFLOAT8E4M3FN": TensorProto.FLOAT8E4M3FN,
    "QInt16": TensorProto.INT16,
    "QUInt16": TensorProto.UINT16,
    "QInt4": TensorProto.INT4,
    "QUInt4": TensorProto.UINT4,
}
_INT_DTYPES: dict[str, type[np.integer]] = {
    "QInt8": np.int8,
    "QUInt8": np.uint8,
    "QInt16": np.int16,
    "QUInt16": np.uint16,
}


class QuantFormat(Enum):
    """Where quantization shows in the graph: QDQ inserts QuantizeLinear/DequantizeLinear pairs;
    QOperator writes QLinear* operators (QLinearConv, com.microsoft QLinearAdd, ...)."""

    QOperator = 0
    QDQ = 1

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def from_string(name: str) -> QuantFormat:
        try:
            return QuantFormat[name]
        except KeyError:
            raise ValueError(name) from None


class CalibrationMethod(Enum):
    """How an activation's range is taken from the calibration runs (Distribution: the values'
    spread, for float8)."""

    MinMax = 0
    Entropy = 1
    Percentile = 2
    Distribution = 3


def quant_range(qtype: QuantType, symmetric: bool, reduce_range: bool = False) -> tuple[int, int]:
    """(qmin, qmax) of an integer `qtype`: symmetric signed types leave out their lowest value
    so that zero sits in the middle; reduce_range drops one bit (for hardware whose dot
    product saturates), as onnxruntime's tables do."""
    bits = np.iinfo(qtype.dtype).bits
    signed = np.iinfo(qtype.dtype).min < 0
    if reduce_range:
        half = 1 << (bits - 2)
        return (-half, half) if signed else (0, (1 << (bits - 1)) - 1)
    if signed:
        top = (1 << (bits - 1)) - 1
        return (-top, top) if symmetric else (-top - 1, top)
    return (0, (1 << bits) - 1)


def check_enum(value: object, enum: type[Enum], what: str) -> Enum:
    """`value` as a member of `enum`, accepting onnxruntime's enum of the same name."""
    if isinstance(value, enum):
        return value
    name = getattr(value, "name", value)
    if isinstance(name, str) and name in enum.__members__:
        return enum[name]
    options = ", ".join(f"{enum.__name__}.{m}" for m in enum.__members__)
    raise InvalidArgument(f"{what}={value!r} is not one of {options}")
