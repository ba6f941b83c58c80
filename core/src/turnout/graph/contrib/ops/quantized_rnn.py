"""DynamicQuantizeLSTM: the LSTM that onnxruntime's dynamic quantizer writes, with 8-bit W and
R (transposed against ONNX's LSTM: [directions, input or hidden, 4 * hidden]) and their scales
and zero points per direction or per gate column."""

from __future__ import annotations

from turnout.graph.contrib.inference import NodeTypes, TensorType
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define


def _lstm(types: NodeTypes) -> list[TensorType | None]:
    x, r = types.input(0), types.input(2)
    if x is None or r is None or x.rank != 3 or r.rank != 3:
        return [None, None, None]
    dirs = 2 if types.attr("direction", "forward") == "bidirectional" else 1
    hidden = types.attr("hidden_size") or r.dim(1)
    state = TensorType(x.elem_type, (dirs, x.dim(1), hidden))
    return [TensorType(x.elem_type, (x.dim(0), dirs, x.dim(1), hidden)), state, state]


define(
    OpSpec(
        "DynamicQuantizeLSTM",
        (
            Arg("X", "T"),
            Arg("W", "T2"),
            Arg("R", "T2"),
            Arg("B", "T", optional=True),
            Arg("sequence_lens", "T1", optional=True),
            Arg("initial_h", "T", optional=True),
            Arg("initial_c", "T", optional=True),
            Arg("P", "T", optional=True),
            Arg("W_scale", "T"),
            Arg("W_zero_point", "T2"),
            Arg("R_scale", "T"),
            Arg("R_zero_point", "T2"),
        ),
        (
            Arg("Y", "T", optional=True),
            Arg("Y_h", "T", optional=True),
            Arg("Y_c", "T", optional=True),
        ),
        {"T": ("float",), "T1": ("int32",), "T2": ("uint8", "int8")},
        _lstm,
        attrs=(
            Attr("activation_alpha", "floats"),
            Attr("activation_beta", "floats"),
            Attr("activations", "strings"),
            Attr("clip", "float"),
            Attr("direction", "string", "forward"),
            Attr("hidden_size", "int"),
            Attr("input_forget", "int", 0),
        ),
    )
)
