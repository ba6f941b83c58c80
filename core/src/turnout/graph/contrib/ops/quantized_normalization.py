"""QEmbedLayerNormalization: EmbedLayerNormalization with 8-bit embedding tables, gamma and
beta (each with its scale and zero point), which onnxruntime's dynamic quantizer writes for an
EmbedLayerNormalization node."""

from __future__ import annotations

from onnx import TensorProto

from turnout.graph.contrib.inference import NodeTypes, TensorType
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define


def _embed(types: NodeTypes) -> list[TensorType | None]:
    ids, word = types.input(0), types.input(2)
    if ids is None or word is None or ids.rank != 2:
        return [None, None]
    batch, seq = ids.dim(0), ids.dim(1)
    return [
        TensorType(TensorProto.FLOAT, (batch, seq, word.dim(1))),
        TensorType(TensorProto.INT32, (batch,)),
    ]


_TABLES = ("word_embedding", "position_embedding", "segment_embedding", "gamma", "beta")
_OPTIONAL = {"segment_embedding"}

define(
    OpSpec(
        "QEmbedLayerNormalization",
        (
            Arg("input_ids", "T1"),
            Arg("segment_ids", "T1", optional=True),
            *(
                Arg(f"{t}_quant" if t not in _OPTIONAL else t, "T2", optional=t in _OPTIONAL)
                for t in _TABLES
            ),
            Arg("mask", "T1", optional=True),
            *(Arg(f"{t}_scale", "T", optional=t in _OPTIONAL) for t in _TABLES),
            *(Arg(f"{t}_zero_point", "T2", optional=t in _OPTIONAL) for t in _TABLES),
        ),
        (Arg("layernorm_out", "T"), Arg("mask_index_out", "T1")),
        {"T1": ("int32",), "T2": ("int8", "uint8"), "T": ("float",)},
        _embed,
        attrs=(Attr("epsilon", "float", 1e-12),),
    )
)
