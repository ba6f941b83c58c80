"""FusedMatMul, the MatMul onnxruntime's graph optimizers write when they fold a Transpose of
either operand (and a Mul/Div by a constant) into the product: `alpha * op(A) @ op(B)`, where
op transposes the last two axes (`transA`/`transB`) after moving the first axis to the second
to last place (`transBatchA`/`transBatchB`: a (S, B, K) input read as (B, S, K)). Batch axes
broadcast as numpy's matmul does."""

from __future__ import annotations

from turnout.graph.contrib.inference import Dim, NodeTypes, TensorType
from turnout.graph.contrib.ops.quantized_matmul import matmul_shape
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_FLOATS = ("float16", "float", "double", "bfloat16")


def operand_shape(shape: tuple[Dim, ...], trans: bool, trans_batch: bool) -> tuple[Dim, ...]:
    """The shape an operand is multiplied as (rank >= 2; a 1-D operand as it is)."""
    if len(shape) < 2:
        return shape
    if trans_batch and len(shape) > 2:
        shape = (*shape[1:-1], shape[0], shape[-1])
    if trans:
        shape = (*shape[:-2], shape[-1], shape[-2])
    return shape


def _fused_matmul(types: NodeTypes) -> list[TensorType | None]:
    a, b = types.input(0), types.input(1)
    if a is None:
        return [None]
    if b is None or a.shape is None or b.shape is None:
        return [TensorType(a.elem_type)]
    sa = operand_shape(a.shape, bool(types.attr("transA", 0)), bool(types.attr("transBatchA", 0)))
    sb = operand_shape(b.shape, bool(types.attr("transB", 0)), bool(types.attr("transBatchB", 0)))
    return [
        TensorType(
            a.elem_type, matmul_shape(TensorType(a.elem_type, sa), TensorType(b.elem_type, sb))
        )
    ]


define(
    OpSpec(
        "FusedMatMul",
        (Arg("A", "T"), Arg("B", "T")),
        (Arg("Y", "T"),),
        {"T": _FLOATS},
        _fused_matmul,
        attrs=(
            Attr("alpha", "float", 1.0),
            Attr("transA", "int", 0),
            Attr("transB", "int", 0),
            Attr("transBatchA", "int", 0),
            Attr("transBatchB", "int", 0),
        ),
    )
)
