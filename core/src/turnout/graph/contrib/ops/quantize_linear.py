"""QuantizeLinear and DequantizeLinear of com.microsoft: ONNX's per-tensor / per-axis linear
quantization (as of opset 13) with 16-bit and 4-bit types below opset 21, which onnxruntime's
QDQ quantizer writes for such types (and with its `UseQDQContribOps` option)."""

from __future__ import annotations

from onnx import TensorProto

from turnout.graph.contrib.inference import NodeTypes, TensorType
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_CODES = ("int8", "uint8", "int16", "uint16", "int4", "uint4")
_FLOATS = ("float16", "float")


def _quantized(types: NodeTypes) -> list[TensorType | None]:
    x, zp = types.input(0), types.input(2)
    elem = zp.elem_type if zp is not None else TensorProto.UINT8
    return [TensorType(elem, None if x is None else x.shape)]


def _dequantized(types: NodeTypes) -> list[TensorType | None]:
    x, scale = types.input(0), types.input(1)
    if scale is None:
        return [None]
    return [TensorType(scale.elem_type, None if x is None else x.shape)]


define(
    OpSpec(
        "QuantizeLinear",
        (Arg("x", "T1"), Arg("y_scale", "T1"), Arg("y_zero_point", "T2", optional=True)),
        (Arg("y", "T2"),),
        {"T1": _FLOATS, "T2": _CODES},
        _quantized,
        attrs=(Attr("axis", "int"),),
    )
)
define(
    OpSpec(
        "DequantizeLinear",
        (Arg("x", "T1"), Arg("x_scale", "T2"), Arg("x_zero_point", "T1", optional=True)),
        (Arg("y", "T2"),),
        {"T1": (*_CODES, "int32"), "T2": _FLOATS},
        _dequantized,
        attrs=(Attr("axis", "int"),),
    )
)
