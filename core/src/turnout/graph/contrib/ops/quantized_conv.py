"""com.microsoft QLinearConv: ONNX's QLinearConv with a `channels_last` attribute (NHWC input
and output, weights still [M, C/group, k...]), which onnxruntime's NHWC transformer writes
into the models it optimizes."""

from __future__ import annotations

from turnout.graph.contrib.inference import Dim, NodeTypes, TensorType
from turnout.graph.contrib.ops.quantized_elementwise import window_output
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_I8 = ("int8", "uint8")
_SCALE = "tensor(float)"


def _conv(types: NodeTypes) -> list[TensorType | None]:
    x, w, zp = types.input(0), types.input(3), types.input(7)
    if zp is None:
        return [None]
    if x is None or w is None or x.shape is None or w.shape is None or len(x.shape) < 3:
        return [TensorType(zp.elem_type)]
    nd = len(x.shape) - 2
    last = bool(types.attr("channels_last", 0))
    spatial = x.shape[1:-1] if last else x.shape[2:]
    kernel = list(types.attr("kernel_shape", []) or w.shape[2:])
    strides = list(types.attr("strides", []) or [1] * nd)
    dilations = list(types.attr("dilations", []) or [1] * nd)
    pads = list(types.attr("pads", []) or [0] * (2 * nd))
    auto = str(types.attr("auto_pad", "NOTSET"))
    if not all(isinstance(k, int) for k in kernel):
        return [TensorType(zp.elem_type)]
    out: list[Dim] = [
        window_output(
            spatial[i],
            (int(kernel[i]) - 1) * dilations[i] + 1,
            strides[i],
            (pads[i], pads[i + nd]),
            auto,
            False,
        )
        for i in range(nd)
    ]
    n, m = x.shape[0], w.shape[0]
    shape = (n, *out, m) if last else (n, m, *out)
    return [TensorType(zp.elem_type, shape)]


define(
    OpSpec(
        "QLinearConv",
        (
            Arg("x", "T1"),
            Arg("x_scale", _SCALE),
            Arg("x_zero_point", "T1"),
            Arg("w", "T2"),
            Arg("w_scale", _SCALE),
            Arg("w_zero_point", "T2"),
            Arg("y_scale", _SCALE),
            Arg("y_zero_point", "T3"),
            Arg("B", "T4", optional=True),
        ),
        (Arg("y", "T3"),),
        {"T1": _I8, "T2": _I8, "T3": _I8, "T4": ("int32",)},
        _conv,
        attrs=(
            Attr("auto_pad", "string", "NOTSET"),
            Attr("channels_last", "int", 0),
            Attr("dilations", "ints"),
            Attr("group", "int", 1),
            Attr("kernel_shape", "ints"),
            Attr("pads", "ints"),
            Attr("strides", "ints"),
        ),
    )
)
