"""Quantized matrix products and quantized lookups that onnxruntime's quantization tools and
optimizer write: QGemm (QOperator Gemm), MatMulIntegerToFloat and DynamicQuantizeMatMul (its
fusions of a dynamically quantized MatMul), MatMulNBits (block-quantized weights of 2 to 8
bits), MatMulBnb4 (bitsandbytes' FP4/NF4 weights), MatMulInteger16 and GatherBlockQuantized
(a block-quantized embedding table)."""

from __future__ import annotations

from onnx import TensorProto

from turnout.graph.contrib.inference import Dim, InferFn, NodeTypes, TensorType
from turnout.graph.contrib.ops.quantized_elementwise import broadcast_shapes
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_I8 = ("uint8", "int8")
_FLOAT = TensorProto.FLOAT


def matmul_shape(a: TensorType | None, b: TensorType | None) -> tuple[Dim, ...] | None:
    """numpy matmul's output shape (1-D operands promoted, batch dims broadcast)."""
    if a is None or b is None or a.shape is None or b.shape is None or not a.shape or not b.shape:
        return None
    sa, sb = a.shape, b.shape
    rows = sa[-2:-1] if len(sa) > 1 else ()
    cols = sb[-1:] if len(sb) > 1 else ()
    batch = broadcast_shapes([sa[:-2], sb[:-2]])
    return (*batch, *rows, *cols)


def _qgemm(types: NodeTypes) -> list[TensorType | None]:
    a, b, yzp = types.input(0), types.input(3), types.input(8)
    elem = yzp.elem_type if yzp is not None else _FLOAT
    if a is None or b is None or a.rank != 2 or b.rank != 2:
        return [TensorType(elem)]
    m = a.dim(1) if types.attr("transA", 0) else a.dim(0)
    n = b.dim(0) if types.attr("transB", 0) else b.dim(1)
    return [TensorType(elem, (m, n))]


define(
    OpSpec(
        "QGemm",
        (
            Arg("A", "TA"),
            Arg("a_scale", "T"),
            Arg("a_zero_point", "TA"),
            Arg("B", "TB"),
            Arg("b_scale", "T"),
            Arg("b_zero_point", "TB"),
            Arg("C", "TC", optional=True),
            Arg("y_scale", "T", optional=True),
            Arg("y_zero_point", "TYZ", optional=True),
        ),
        (Arg("Y", "TY"),),
        {
            "T": ("float",),
            "TA": _I8,
            "TB": _I8,
            "TC": ("int32",),
            "TYZ": _I8,
            "TY": ("float", "uint8", "int8"),
        },
        _qgemm,
        attrs=(Attr("alpha", "float", 1.0), Attr("transA", "int", 0), Attr("transB", "int", 0)),
    )
)


def _typed_product(a: int, b: int, type_of: int) -> InferFn:
    """A product's shape, in the type of input `type_of`."""

    def infer(types: NodeTypes) -> list[TensorType | None]:
        t = types.input(type_of)
        elem = t.elem_type if t is not None else _FLOAT
        return [TensorType(elem, matmul_shape(types.input(a), types.input(b)))]

    return infer


define(
    OpSpec(
        "MatMulIntegerToFloat",
        (
            Arg("A", "T1"),
            Arg("B", "T2"),
            Arg("a_scale", "T3"),
            Arg("b_scale", "T3"),
            Arg("a_zero_point", "T1", optional=True),
            Arg("b_zero_point", "T2", optional=True),
            Arg("bias", "T3", optional=True),
        ),
        (Arg("Y", "T3"),),
        {"T1": ("int8", "uint8"), "T2": ("int8", "uint8"), "T3": ("float", "float16")},
        _typed_product(0, 1, type_of=2),
    )
)
define(
    OpSpec(
        "DynamicQuantizeMatMul",
        (
            Arg("A", "T1"),
            Arg("B", "T2"),
            Arg("b_scale", "T1"),
            Arg("b_zero_point", "T2", optional=True),
            Arg("bias", "T1", optional=True),
        ),
        (Arg("Y", "T1"),),
        {"T1": ("float",), "T2": ("int8", "uint8")},
        _typed_product(0, 1, type_of=0),
    )
)


def _nbits(types: NodeTypes) -> list[TensorType | None]:
    a = types.input(0)
    if a is None:
        return [None]
    n = types.attr("N")
    return [TensorType(a.elem_type, None if a.shape is None else (*a.shape[:-1], n))]


define(
    OpSpec(
        "MatMulNBits",
        (
            Arg("A", "T1"),
            Arg("B", "T2"),
            Arg("scales", "T1"),
            Arg("zero_points", "T3", optional=True),
            Arg("g_idx", "T4", optional=True),
            Arg("bias", "T1", optional=True),
        ),
        (Arg("Y", "T1"),),
        {
            "T1": ("float", "float16", "bfloat16"),
            "T2": ("uint8",),
            "T3": ("uint8", "float16", "float", "bfloat16"),
            "T4": ("int32",),
        },
        _nbits,
        attrs=(
            Attr("K", "int", required=True),
            Attr("N", "int", required=True),
            Attr("accuracy_level", "int", 0),
            Attr("bits", "int", 4),
            Attr("block_size", "int", required=True),
            Attr("weight_prepacked", "int", 0),
        ),
    )
)


def _gather(types: NodeTypes) -> list[TensorType | None]:
    data, indices, scales = types.input(0), types.input(1), types.input(2)
    if scales is None:
        return [None]
    if data is None or indices is None or data.shape is None or indices.shape is None:
        return [TensorType(scales.elem_type)]
    rank = len(data.shape)
    axis = int(types.attr("gather_axis", 0)) % rank
    shape = list(data.shape)
    bits = int(types.attr("bits", 4))
    last = shape[-1]
    if data.elem_type == TensorProto.UINT8 and bits < 8 and isinstance(last, int):
        shape[-1] = last * (8 // bits)  # packed codes along the last axis
    out = (*shape[:axis], *indices.shape, *shape[axis + 1 :])
    return [TensorType(scales.elem_type, out)]


define(
    OpSpec(
        "GatherBlockQuantized",
        (
            Arg("data", "T1"),
            Arg("indices", "Tind"),
            Arg("scales", "T2"),
            Arg("zero_points", "T1", optional=True),
        ),
        (Arg("output", "T2"),),
        {
            "T1": (
                "int4",
                "uint4",
                "uint8",
                "float8e4m3fn",
                "float8e4m3fnuz",
                "float8e5m2",
                "float8e5m2fnuz",
                "float4e2m1",
            ),
            "T2": ("float", "float16", "bfloat16"),
            "Tind": ("int32", "int64"),
        },
        _gather,
        attrs=(
            Attr("bits", "int", 4),
            Attr("block_size", "int", 128),
            Attr("gather_axis", "int", 0),
            Attr("quantize_axis", "int", 1),
        ),
    )
)


def _int16_product(types: NodeTypes) -> list[TensorType | None]:
    """int32, or uint32 when both operands are uint16."""
    a, b = types.input(0), types.input(1)
    unsigned = a is not None and b is not None and a.elem_type == b.elem_type == TensorProto.UINT16
    elem = TensorProto.UINT32 if unsigned else TensorProto.INT32
    return [TensorType(elem, matmul_shape(a, b))]


define(
    OpSpec(
        "MatMulInteger16",
        (Arg("A", "T1"), Arg("B", "T2")),
        (Arg("Y", "T3"),),
        {"T1": ("int16", "uint16"), "T2": ("int16", "uint16"), "T3": ("int32", "uint32")},
        _int16_product,
    )
)


def _bnb4(types: NodeTypes) -> list[TensorType | None]:
    a = types.input(0)
    if a is None:
        return [None]
    n = types.attr("K") if not types.attr("transB", 1) else types.attr("N")
    return [TensorType(a.elem_type, None if a.shape is None else (*a.shape[:-1], n))]


define(
    OpSpec(
        "MatMulBnb4",
        (Arg("A", "T1"), Arg("B", "T2"), Arg("absmax", "T1")),
        (Arg("Y", "T1"),),
        {"T1": ("float", "float16", "bfloat16"), "T2": ("uint8",)},
        _bnb4,
        attrs=(
            Attr("K", "int", required=True),
            Attr("N", "int", required=True),
            Attr("block_size", "int", required=True),
            Attr("quant_type", "int", required=True),
            Attr("training_mode", "int", 0),
            Attr("transB", "int", 1),
        ),
    )
)
