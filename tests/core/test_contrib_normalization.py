"""SkipLayerNormalization, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization and
EmbedLayerNormalization against onnxruntime's CPU kernels: shapes, float32 and float16 (where
onnxruntime's CPU provider has them), attributes, optional inputs present and absent, optional
outputs requested."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN

Rng = np.random.Generator


def _f(rng: Rng, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


SKIP_SHAPES = [
    ((2, 3, 16), (2, 3, 16)),
    ((2, 3, 16), (3, 16)),
    ((1, 5, 8), (1, 5, 8)),
    ((6, 16), (6, 16)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shapes", SKIP_SHAPES)
@pytest.mark.parametrize("beta", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_skip_layer_normalization(
    contrib_parity: Any,
    rng: Rng,
    dtype: Any,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
    beta: bool,
    bias: bool,
) -> None:
    xs, ss = shapes
    h = xs[-1]
    inputs: list[Any] = [_f(rng, xs, dtype), _f(rng, ss, dtype), _f(rng, (h,), dtype)]
    inputs += [_f(rng, (h,), dtype) if beta else None, _f(rng, (h,), dtype) if bias else None]
    names = ["x", "s", "g", "b" if beta else "", "bias" if bias else ""]
    while not names[-1]:
        names.pop()
        inputs.pop()
    node = helper.make_node(
        "SkipLayerNormalization", names, ["y", "mean", "inv", "sum"], domain=DOMAIN
    )
    _y, mean, inv, _total = contrib_parity(node, inputs)
    assert mean.shape == inv.shape == (*xs[:-1], 1)


@pytest.mark.parametrize("outputs", [["y"], ["y", "", "", "sum"], ["y", "", "inv"]])
def test_skip_layer_normalization_optional_outputs(
    contrib_parity: Any, rng: Rng, outputs: list[str]
) -> None:
    node = helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g"], outputs, domain=DOMAIN, epsilon=1e-5
    )
    got = contrib_parity(node, [_f(rng, (2, 4, 8)), _f(rng, (2, 4, 8)), _f(rng, (8,))])
    assert len(got) == len([o for o in outputs if o])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("bias", [True, False])
def test_skip_simplified_layer_normalization(
    contrib_parity: Any, rng: Rng, dtype: Any, bias: bool
) -> None:
    names = ["x", "s", "g"] + (["bias"] if bias else [])
    inputs = [_f(rng, (2, 3, 16), dtype), _f(rng, (2, 3, 16), dtype), _f(rng, (16,), dtype)]
    inputs += [_f(rng, (16,), dtype)] if bias else []
    # mean is not part of an RMS norm: compared here through the other outputs only
    node = helper.make_node(
        "SkipSimplifiedLayerNormalization", names, ["y", "", "inv", "sum"], domain=DOMAIN
    )
    contrib_parity(node, inputs)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("epsilon", [None, 1e-3])
def test_simplified_layer_normalization(
    contrib_parity: Any, rng: Rng, dtype: Any, epsilon: float | None
) -> None:
    """In the ONNX domain, as onnxruntime registers it (any ai.onnx opset)."""
    attrs: dict[str, Any] = {} if epsilon is None else {"epsilon": epsilon}
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y", "inv"], **attrs)
    _y, inv = contrib_parity(node, [_f(rng, (2, 3, 16), dtype), _f(rng, (16,), dtype)])
    assert inv.shape == (2, 3, 1) and inv.dtype == np.float32


def test_simplified_layer_normalization_over_two_axes(contrib_parity: Any, rng: Rng) -> None:
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], axis=1)
    contrib_parity(node, [_f(rng, (2, 3, 8)), _f(rng, (3, 8))])


def _embed_inputs(
    rng: Rng, segment: bool, mask: bool, positions: str
) -> tuple[list[str], list[Any]]:
    batch, seq, hidden, vocab = 2, 5, 16, 30
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
    seg = rng.integers(0, 2, (batch, seq)).astype(np.int32)
    m = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], np.int32)
    pos = {"none": None, "full": rng.integers(0, 8, (batch, seq)), "row": np.arange(seq)[None]}
    names = ["ids", "seg" if segment else "", "w", "p", "se" if segment else "", "g", "b"]
    values = [
        ids,
        seg if segment else None,
        _f(rng, (vocab, hidden)),
        _f(rng, (8, hidden)),
        _f(rng, (2, hidden)) if segment else None,
        _f(rng, (hidden,)),
        _f(rng, (hidden,)),
    ]
    if mask or positions != "none":
        names.append("m" if mask else "")
        values.append(m if mask else None)
    if positions != "none":
        names.append("pos")
        values.append(np.asarray(pos[positions]).astype(np.int32))
    return names, values


@pytest.mark.parametrize("segment", [True, False])
@pytest.mark.parametrize("mask", [True, False])
@pytest.mark.parametrize("positions", ["none", "full", "row"])
def test_embed_layer_normalization(
    contrib_parity: Any, rng: Rng, segment: bool, mask: bool, positions: str
) -> None:
    names, values = _embed_inputs(rng, segment, mask, positions)
    node = helper.make_node(
        "EmbedLayerNormalization", names, ["y", "mask_index", "sum"], domain=DOMAIN
    )
    _y, mask_index, _total = contrib_parity(node, values)
    assert mask_index.dtype == np.int32


def test_embed_layer_normalization_refuses_ids_out_of_range(rng: Rng) -> None:
    import turnout
    from turnout.graph.errors import InvalidArgument
    from turnout.tools.testing import one_node_model

    names, values = _embed_inputs(rng, False, False, "none")
    values[0][0, 0] = 30
    node = helper.make_node("EmbedLayerNormalization", names, ["y"], domain=DOMAIN, name="emb")
    sess = turnout.InferenceSession(one_node_model(node, values, 17).SerializeToString())
    feeds = {n: v for n, v in zip(names, values) if n}
    with pytest.raises(InvalidArgument, match=r"emb.*input_ids"):
        sess.run(None, feeds)


@pytest.mark.parametrize("opset", [11, 14, 17])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_normalization_before_opset_17(
    contrib_parity: Any, rng: Rng, opset: int, with_bias: bool
) -> None:
    """onnxruntime's optimizer emits LayerNormalization at the model's opset; onnxruntime runs
    it from version 1 (its ONNX-domain contrib op)."""
    names = ["x", "g", "b"] if with_bias else ["x", "g"]
    node = helper.make_node("LayerNormalization", names, ["y", "mean", "inv"], epsilon=1e-3)
    values = [_f(rng, (2, 3, 16)), _f(rng, (16,))] + ([_f(rng, (16,))] if with_bias else [])
    _, mean, inv = contrib_parity(node, values, opset=opset)
    assert mean.shape == inv.shape == (2, 3, 1)


def test_embed_layer_normalization_float16(
    contrib_parity: Any, float32_oracle: Any, rng: Rng
) -> None:
    """onnxruntime's CPU kernel is float32 only: held to its float32 result."""
    names, values = _embed_inputs(rng, True, True, "none")
    values = [
        v.astype(np.float16) if v is not None and v.dtype == np.float32 else v for v in values
    ]
    node = helper.make_node(
        "EmbedLayerNormalization", names, ["y", "mask_index", "sum"], domain=DOMAIN
    )
    contrib_parity(node, values, reference=float32_oracle(node, values))
