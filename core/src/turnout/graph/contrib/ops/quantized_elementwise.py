"""Quantized element-wise, pooling, concat, softmax and reduction ops that onnxruntime's static
quantizer writes in its QOperator format (QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QLinearSoftmax,
QLinearWhere, QLinearReduceMean). Each takes uint8 or int8 data with float scales and zero
points of the data's type, and gives data of that type; MulInteger gives the int32 products."""

from __future__ import annotations

import math

from onnx import TensorProto

from turnout.graph.contrib.inference import Dim, InferFn, NodeTypes, TensorType, same_as
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_Q = {"T": ("uint8", "int8")}
_SCALE = "tensor(float)"


def broadcast_shapes(shapes: list[tuple[Dim, ...]]) -> tuple[Dim, ...]:
    """numpy broadcasting of known shapes (an unknown dim stays unknown unless another is >1)."""
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        sized = {d for d in dims if isinstance(d, int) and d != 1}
        if sized:
            out.append(sized.pop())
        elif all(d == 1 for d in dims):
            out.append(1)
        else:
            out.append(next((d for d in dims if d != 1), None))
    return tuple(out)


def _broadcasting(*indices: int, type_of: int) -> InferFn:
    """Type of input `type_of`, shape broadcast from the inputs at `indices`."""

    def infer(types: NodeTypes) -> list[TensorType | None]:
        first = types.input(type_of)
        found = [types.input(i) for i in indices]
        if first is None:
            return [None]
        shapes = [t.shape for t in found if t is not None]
        if len(shapes) != len(indices) or any(s is None for s in shapes):
            return [TensorType(first.elem_type)]
        return [TensorType(first.elem_type, broadcast_shapes([s for s in shapes if s is not None]))]

    return infer


def _binary(name: str) -> None:
    define(
        OpSpec(
            name,
            (
                Arg("A", "T"),
                Arg("A_scale", _SCALE),
                Arg("A_zero_point", "T", optional=True),
                Arg("B", "T"),
                Arg("B_scale", _SCALE),
                Arg("B_zero_point", "T", optional=True),
                Arg("C_scale", _SCALE),
                Arg("C_zero_point", "T", optional=True),
            ),
            (Arg("C", "T"),),
            _Q,
            _broadcasting(0, 3, type_of=0),
        )
    )


_binary("QLinearAdd")
_binary("QLinearMul")

_UNARY_INPUTS = (
    Arg("X", "T"),
    Arg("X_scale", _SCALE),
    Arg("X_zero_point", "T", optional=True),
    Arg("Y_scale", _SCALE),
    Arg("Y_zero_point", "T", optional=True),
)
define(OpSpec("QLinearSigmoid", _UNARY_INPUTS, (Arg("Y", "T"),), _Q, same_as(0)))
define(
    OpSpec(
        "QLinearLeakyRelu",
        _UNARY_INPUTS,
        (Arg("Y", "T"),),
        _Q,
        same_as(0),
        attrs=(Attr("alpha", "float", 0.01),),
    )
)


def _global_pool(types: NodeTypes) -> list[TensorType | None]:
    x = types.input(0)
    if x is None or x.shape is None or len(x.shape) < 3:
        return [None if x is None else TensorType(x.elem_type)]
    if types.attr("channels_last", 0):
        return [TensorType(x.elem_type, (x.shape[0], *[1] * (len(x.shape) - 2), x.shape[-1]))]
    return [TensorType(x.elem_type, (*x.shape[:2], *[1] * (len(x.shape) - 2)))]


define(
    OpSpec(
        "QLinearGlobalAveragePool",
        (
            Arg("X", "T"),
            Arg("x_scale", _SCALE),
            Arg("x_zero_point", "T"),
            Arg("y_scale", _SCALE),
            Arg("y_zero_point", "T"),
        ),
        (Arg("Y", "T"),),
        _Q,
        _global_pool,
        attrs=(Attr("channels_last", "int", 0),),
    )
)


def window_output(size: Dim, k: int, s: int, pads: tuple[int, int], auto: str, ceil: bool) -> Dim:
    """Output size of a sliding window (size k, the effective one when dilated) along one
    axis."""
    if not isinstance(size, int):
        return None
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return -(-size // s)
    if auto == "VALID":
        return -(-(size - k + 1) // s)
    span = size + pads[0] + pads[1] - k
    return (math.ceil if ceil else math.floor)(span / s) + 1


def _avg_pool(types: NodeTypes) -> list[TensorType | None]:
    x = types.input(0)
    if x is None or x.shape is None or len(x.shape) < 3:
        return [None if x is None else TensorType(x.elem_type)]
    kernel = list(types.attr("kernel_shape", []))
    nd = len(x.shape) - 2
    strides = list(types.attr("strides", []) or [1] * nd)
    pads = list(types.attr("pads", []) or [0] * (2 * nd))
    auto, ceil = str(types.attr("auto_pad", "NOTSET")), bool(types.attr("ceil_mode", 0))
    last = bool(types.attr("channels_last", 0))
    spatial = x.shape[1:-1] if last else x.shape[2:]
    out = tuple(
        window_output(spatial[i], kernel[i], strides[i], (pads[i], pads[i + nd]), auto, ceil)
        for i in range(nd)
    )
    shape = (x.shape[0], *out, x.shape[-1]) if last else (*x.shape[:2], *out)
    return [TensorType(x.elem_type, shape)]


define(
    OpSpec(
        "QLinearAveragePool",
        (
            Arg("X", "T"),
            Arg("x_scale", _SCALE),
            Arg("x_zero_point", "T", optional=True),
            Arg("y_scale", _SCALE),
            Arg("y_zero_point", "T", optional=True),
        ),
        (Arg("Y", "T"),),
        _Q,
        _avg_pool,
        attrs=(
            Attr("auto_pad", "string", "NOTSET"),
            Attr("ceil_mode", "int", 0),
            Attr("channels_last", "int", 0),
            Attr("count_include_pad", "int", 0),
            Attr("kernel_shape", "ints", required=True),
            Attr("pads", "ints"),
            Attr("strides", "ints"),
        ),
    )
)


def _concat(types: NodeTypes) -> list[TensorType | None]:
    zp = types.input(1)
    if zp is None:
        return [None]
    parts = types.inputs[2::3]
    if any(p is None or p.shape is None for p in parts) or not parts:
        return [TensorType(zp.elem_type)]
    shapes = [p.shape for p in parts if p is not None and p.shape is not None]
    rank = len(shapes[0])
    axis = int(types.attr("axis", 0)) % rank if rank else 0
    sizes = [s[axis] for s in shapes]
    total: Dim = sum(d for d in sizes if isinstance(d, int))
    if not all(isinstance(d, int) for d in sizes):
        total = None
    return [TensorType(zp.elem_type, (*shapes[0][:axis], total, *shapes[0][axis + 1 :]))]


define(
    OpSpec(
        "QLinearConcat",
        (
            Arg("Y_scale", "TF"),
            Arg("Y_zero_point", "T8"),
            Arg("inputs", "TV", variadic=True, homogeneous=False),
        ),
        (Arg("Y", "T8"),),
        {"TF": ("float",), "T8": ("uint8", "int8"), "TV": ("uint8", "int8", "float")},
        _concat,
        attrs=(Attr("axis", "int", required=True),),
    )
)
define(
    OpSpec(
        "QLinearSoftmax",
        (
            Arg("X", "T"),
            Arg("X_scale", _SCALE),
            Arg("x_zero_point", "T", optional=True),
            Arg("y_scale", _SCALE),
            Arg("y_zero_point", "T"),
        ),
        (Arg("Y", "T"),),
        _Q,
        same_as(0),
        attrs=(Attr("axis", "int", -1), Attr("opset", "int", required=True)),
    )
)
define(
    OpSpec(
        "QLinearWhere",
        (
            Arg("condition", "B"),
            Arg("X", "T"),
            Arg("x_scale", "TF"),
            Arg("x_zero_point", "T"),
            Arg("Y", "T"),
            Arg("y_scale", "TF"),
            Arg("y_zero_point", "T"),
            Arg("z_scale", "TF"),
            Arg("z_zero_point", "T"),
        ),
        (Arg("Z", "T"),),
        {"B": ("bool",), "TF": ("float",), "T": ("uint8", "int8")},
        _broadcasting(0, 1, 4, type_of=1),
    )
)


def _reduced(types: NodeTypes) -> list[TensorType | None]:
    x = types.input(0)
    if x is None or x.shape is None:
        return [x]
    rank = len(x.shape)
    axes = {int(a) % rank for a in types.attr("axes", []) or range(rank)}
    keep = bool(types.attr("keepdims", 1))
    dims = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
    return [TensorType(x.elem_type, tuple(dims))]


define(
    OpSpec(
        "QLinearReduceMean",
        (
            Arg("data", "T"),
            Arg("data_scale", _SCALE),
            Arg("data_zero_point", "T", optional=True),
            Arg("reduced_scale", _SCALE),
            Arg("reduced_zero_point", "T", optional=True),
        ),
        (Arg("reduced", "T"),),
        _Q,
        _reduced,
        attrs=(Attr("axes", "ints", required=True), Attr("keepdims", "int", required=True)),
    )
)


def _int32_product(types: NodeTypes) -> list[TensorType | None]:
    (c,) = _broadcasting(0, 2, type_of=0)(types)
    return [None if c is None else TensorType(TensorProto.INT32, c.shape)]


define(
    OpSpec(
        "MulInteger",
        (
            Arg("A", "T"),
            Arg("A_zero_point", "T", optional=True),
            Arg("B", "T"),
            Arg("B_zero_point", "T", optional=True),
        ),
        (Arg("C", "T1"),),
        {"T": ("uint8", "int8"), "T1": ("int32",)},
        _int32_product,
    )
)
