"""Layer normalizations that onnxruntime's optimizers fuse: SkipLayerNormalization,
SkipSimplifiedLayerNormalization (RMS), EmbedLayerNormalization, and two that onnxruntime
registers in the ONNX domain from version 1: the RMS norm SimplifiedLayerNormalization, and
LayerNormalization (ONNX's own arrived at opset 17; the optimizer emits it at any opset)."""

from __future__ import annotations

from onnx import TensorProto

from turnout.graph.contrib.inference import NodeTypes, TensorType
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_FLOATS = ("float", "float16", "bfloat16")
_FLOAT = TensorProto.FLOAT


def _statistic(x: TensorType | None) -> TensorType | None:
    """mean / inv_std_var: float, one per row of the last axis."""
    if x is None:
        return None
    return TensorType(_FLOAT, None if x.shape is None else (*x.shape[:-1], 1))


def _skip_norm(types: NodeTypes) -> list[TensorType | None]:
    x = types.input(0)
    return [x, _statistic(x), _statistic(x), x]


_SKIP_OUTPUTS = (
    Arg("output", "T"),
    Arg("mean", "U", optional=True),
    Arg("inv_std_var", "U", optional=True),
    Arg("input_skip_bias_sum", "T", optional=True),
)
define(
    OpSpec(
        "SkipLayerNormalization",
        (
            Arg("input", "T"),
            Arg("skip", "T"),
            Arg("gamma", "T"),
            Arg("beta", "T", optional=True),
            Arg("bias", "T", optional=True),
        ),
        _SKIP_OUTPUTS,
        {"T": _FLOATS, "U": ("float",)},
        _skip_norm,
        attrs=(Attr("epsilon", "float", 1e-12),),
    )
)
define(
    OpSpec(
        "SkipSimplifiedLayerNormalization",
        (Arg("input", "T"), Arg("skip", "T"), Arg("gamma", "T"), Arg("bias", "T", optional=True)),
        _SKIP_OUTPUTS,
        {"T": _FLOATS, "U": ("float",)},
        _skip_norm,
        attrs=(Attr("epsilon", "float", 1e-12),),
    )
)


def _reduced_norm(types: NodeTypes) -> list[TensorType | None]:
    """Y like X (in the scale's type); the float statistics with the normalized axes kept as
    1 (for every statistic output the op has)."""
    x, scale = types.input(0), types.input(1)
    n_stats = len(types.outputs) - 1
    if x is None:
        return [None] * (1 + n_stats)
    y = TensorType(scale.elem_type if scale is not None else x.elem_type, x.shape)
    if x.shape is None:
        return [y, *([None] * n_stats)]
    axis = int(types.attr("axis", -1))
    axis = axis + len(x.shape) if axis < 0 else axis
    stat = TensorType(_FLOAT, tuple(d if i < axis else 1 for i, d in enumerate(x.shape)))
    return [y, *([stat] * n_stats)]


_FLOAT_TYPES = ("float16", "float", "double", "bfloat16")
_NORM_ATTRS = (
    Attr("axis", "int", -1),
    Attr("epsilon", "float", 1e-5),
    Attr("stash_type", "int", 1),
)
define(
    OpSpec(
        "LayerNormalization",
        (Arg("X", "T"), Arg("Scale", "V"), Arg("B", "V", optional=True)),
        (
            Arg("Y", "V"),
            Arg("Mean", "U", optional=True),
            Arg("InvStdDev", "U", optional=True),
        ),
        {"T": _FLOAT_TYPES, "U": ("float", "double"), "V": _FLOAT_TYPES},
        _reduced_norm,
        attrs=_NORM_ATTRS,
        domain="",
    )
)


define(
    OpSpec(
        "SimplifiedLayerNormalization",
        (Arg("X", "T"), Arg("scale", "V")),
        (Arg("Y", "V"), Arg("inv_std_var", "U", optional=True)),
        {"T": _FLOAT_TYPES, "U": ("float", "double"), "V": _FLOAT_TYPES},
        _reduced_norm,
        attrs=_NORM_ATTRS,
        domain="",
    )
)


def _embed(types: NodeTypes) -> list[TensorType | None]:
    ids, word = types.input(0), types.input(2)
    if ids is None or word is None or ids.rank != 2:
        return [None, None, None]
    batch, seq = ids.dim(0), ids.dim(1)
    out = TensorType(word.elem_type, (batch, seq, word.dim(1)))
    return [out, TensorType(TensorProto.INT32, (batch,)), out]


define(
    OpSpec(
        "EmbedLayerNormalization",
        (
            Arg("input_ids", "T1"),
            Arg("segment_ids", "T1", optional=True),
            Arg("word_embedding", "T"),
            Arg("position_embedding", "T"),
            Arg("segment_embedding", "T", optional=True),
            Arg("gamma", "T"),
            Arg("beta", "T"),
            Arg("mask", "T1", optional=True),
            Arg("position_ids", "T1", optional=True),
        ),
        (
            Arg("output", "T"),
            Arg("mask_index", "T1", optional=True),
            Arg("embedding_sum", "T", optional=True),
        ),
        {"T1": ("int32",), "T": ("float", "float16")},
        _embed,
        attrs=(Attr("epsilon", "float", 1e-12), Attr("mask_index_type", "int")),
    )
)
