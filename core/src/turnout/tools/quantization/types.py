"""The option enums of the quantization API, named and numbered as onnxruntime.quantization's,
so code that passes `QuantType.QInt8` or `CalibrationMethod.MinMax` switches by changing an
import."""

from __future__ import annotations

from enum import Enum

import numpy as np
from onnx import TensorProto

from turnout.graph import errors
from turnout.graph.errors import InvalidArgument

__all__ = ["CalibrationMethod", "QuantFormat", "QuantType", "quant_range"]


class QuantType(Enum):
    """Integer type of quantized weights or activations (8-bit only here)."""

    QInt8 = 0
    QUInt8 = 1

    @property
    def tensor_type(self) -> int:
        """The ONNX element type (TensorProto.INT8 / UINT8)."""
        return TensorProto.INT8 if self is QuantType.QInt8 else TensorProto.UINT8

    @property
    def dtype(self) -> type[np.integer]:
        return np.int8 if self is QuantType.QInt8 else np.uint8

    @classmethod
    def of(cls, value: object, what: str) -> QuantType:
        """`value` as a QuantType; other types (16-bit, 4-bit, float8) are refused by name."""
        if isinstance(value, cls):
            return value
        name = getattr(value, "name", value)
        if isinstance(name, str) and name in cls.__members__:
            return cls[name]
        raise errors.NotImplemented(
            f"{what}={value!r}: turnout.tools.quantization supports QuantType.QInt8 and QUInt8"
        )


class QuantFormat(Enum):
    """Where quantization shows in the graph: QDQ inserts QuantizeLinear/DequantizeLinear pairs;
    QOperator would use QLinear* operators (not supported for static quantization here)."""

    QOperator = 0
    QDQ = 1


class CalibrationMethod(Enum):
    """How an activation's range is taken from the calibration runs."""

    MinMax = 0
    Entropy = 1
    Percentile = 2


def quant_range(qtype: QuantType, symmetric: bool, reduce_range: bool = False) -> tuple[int, int]:
    """(qmin, qmax) of `qtype`: symmetric int8 leaves out -128 so that zero sits in the middle;
    reduce_range uses 7 bits (for hardware whose int8 dot product saturates)."""
    if qtype is QuantType.QInt8:
        if reduce_range:
            return (-64, 64)
        return (-127, 127) if symmetric else (-128, 127)
    if reduce_range:
        return (0, 127)
    return (0, 255)


def check_enum(value: object, enum: type[Enum], what: str) -> Enum:
    """`value` as a member of `enum`, accepting onnxruntime's enum of the same name."""
    if isinstance(value, enum):
        return value
    name = getattr(value, "name", value)
    if isinstance(name, str) and name in enum.__members__:
        return enum[name]
    options = ", ".join(f"{enum.__name__}.{m}" for m in enum.__members__)
    raise InvalidArgument(f"{what}={value!r} is not one of {options}")
