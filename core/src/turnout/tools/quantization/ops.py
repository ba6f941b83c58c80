"""What static (QDQ) quantization does around each op type, in one table.

- weighted: input 0 is an activation, input 1 a weight (int8, per channel along the op's output
  channel axis when asked), input 2 a bias (int32 at input scale * weight scale); output quantized.
- removable: Relu and Clip; when the producer's output is quantized anyway, the op is dropped
  and its range (clipped at 0, or at Clip's bounds) does the clipping in QuantizeLinear.
- passthrough: ops that move or select values without changing them; quantized only when their
  input is, and their outputs reuse the input's scale and zero point (no requantization). A
  Gather from a constant table (an embedding) quantizes the table in the activation type from
  its own min/max, and the output reuses the table's scale and zero point.
- generic: every float input and the outputs get their own calibrated range.
- normalization: input 0 and the output are activations, input 1 (the scale) a weight.
- where: inputs 1 and 2 and the output get their own ranges with ForceQuantizeNoInputCheck;
  without it only the output, when both inputs already are quantized (QDQ format only).
- pad: input 0 is always an activation, and so is the padding value (a constant one stored in
  the activation type, from its own range); the output reuses its scale and zero point when the
  padding takes values of the input (edge, reflect, wrap) or pads with 0, else it gets its own
  range. In QOperator format Pad is a pass-through op that pads the 8-bit values.
"""

from __future__ import annotations

import onnx
from onnx import helper

__all__ = ["QOPERATOR_ROLES", "STATIC_ROLES", "weight_axis"]

STATIC_ROLES: dict[str, str] = {
    **dict.fromkeys(("Conv", "ConvTranspose", "MatMul", "Gemm"), "weighted"),
    **dict.fromkeys(("Relu", "Clip"), "removable"),
    **dict.fromkeys(
        (
            "MaxPool",
            "AveragePool",
            "Reshape",
            "Transpose",
            "Squeeze",
            "Unsqueeze",
            "Flatten",
            "Slice",
            "Resize",
            "Split",
            "Gather",
            "TopK",
        ),
        "passthrough",
    ),
    **dict.fromkeys(
        ("Add", "Mul", "Concat", "GlobalAveragePool", "Sigmoid", "Softmax", "LeakyRelu"),
        "generic",
    ),
    **dict.fromkeys(
        ("BatchNormalization", "LayerNormalization", "InstanceNormalization"), "normalization"
    ),
    "Pad": "pad",
    "Where": "where",
}


# QOperator format quantizes only the ops that have a QLinear* form (or run on 8 bits directly),
# as onnxruntime's QLinearOps registry: Slice, ConvTranspose, TopK and the normalizations stay
# float there
QOPERATOR_ROLES: dict[str, str] = {
    op: "passthrough" if role == "pad" else role
    for op, role in STATIC_ROLES.items()
    if op
    not in (
        "Slice",
        "ConvTranspose",
        "TopK",
        "BatchNormalization",
        "LayerNormalization",
        "InstanceNormalization",
    )
}


def weight_axis(node: onnx.NodeProto) -> int:
    """The output-channel axis of a weighted node's weight, as onnxruntime's QDQ quantizer takes
    it: Conv W [M, C, ...] axis 0, ConvTranspose W [C, M, ...] axis 1, MatMul axis 1 (B [K, N]'s
    N), Gemm B axis 1, or 0 when transB."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":  # W [C, M/group, k...]
        return 1
    if node.op_type == "Gemm":
        trans = next(
            (helper.get_attribute_value(a) for a in node.attribute if a.name == "transB"), 0
        )
        return 0 if trans else 1
    return 1  # MatMul: onnxruntime's default axis (B's last for a 2-D B)
