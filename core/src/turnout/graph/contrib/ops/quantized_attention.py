"""QAttention: the Attention op with an 8-bit input and QKV weight, which onnxruntime's dynamic
quantizer writes for a com.microsoft Attention node (the input quantized by a
DynamicQuantizeLinear before it). Its output and present state are float."""

from __future__ import annotations

from turnout.graph.contrib.inference import NodeTypes, TensorType
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_I8 = ("int8", "uint8")


def _qattention(types: NodeTypes) -> list[TensorType | None]:
    x, w, scale, past = types.input(0), types.input(1), types.input(3), types.input(8)
    if x is None or scale is None or x.rank != 3:
        return [None, None]
    heads = int(types.attr("num_heads", 1))
    width = w.dim(1) if w is not None else None
    hidden = width // 3 if isinstance(width, int) else None
    batch, seq = x.dim(0), x.dim(1)
    past_len = 0 if past is None else past.dim(3)
    total = past_len + seq if isinstance(past_len, int) and isinstance(seq, int) else None
    head = hidden // heads if isinstance(hidden, int) and heads else None
    return [
        TensorType(scale.elem_type, (batch, seq, hidden)),
        TensorType(scale.elem_type, (2, batch, heads, total, head)),
    ]


define(
    OpSpec(
        "QAttention",
        (
            Arg("input", "T1"),
            Arg("weight", "T2"),
            Arg("bias", "T3"),
            Arg("input_scale", "T3"),
            Arg("weight_scale", "T3"),
            Arg("mask_index", "T4", optional=True),
            Arg("input_zero_point", "T1", optional=True),
            Arg("weight_zero_point", "T2", optional=True),
            Arg("past", "T3", optional=True),
        ),
        (Arg("output", "T3"), Arg("present", "T3", optional=True)),
        {"T1": _I8, "T2": _I8, "T3": ("float", "float16"), "T4": ("int32",)},
        _qattention,
        attrs=(
            Attr("num_heads", "int", required=True),
            Attr("unidirectional", "int", 0),
            Attr("scale", "float"),
            Attr("mask_filter_value", "float"),
            Attr("do_rotary", "int"),
            Attr("past_present_share_buffer", "int"),
        ),
    )
)
