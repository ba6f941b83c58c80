"""Gelu, BiasGelu, FastGelu, QuickGelu and BiasAdd (com.microsoft) against onnxruntime, or
against the documented formula where onnxruntime's CPU provider has no kernel (BiasAdd, and
every one of them in float16)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN

SHAPES = [(2, 3, 8), (1, 5, 16), (7, 4)]


def _gelu(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    y: np.ndarray = (0.5 * x64 * (1 + erf(x64 / math.sqrt(2)))).astype(x.dtype)
    return y


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    inner = math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)
    y: np.ndarray = (0.5 * x64 * (1 + np.tanh(inner))).astype(x.dtype)
    return y


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return (rng.standard_normal(shape) * 3).astype(dtype)


@pytest.mark.parametrize("shape", SHAPES)
def test_gelu(contrib_parity: Any, rng: np.random.Generator, shape: tuple[int, ...]) -> None:
    node = helper.make_node("Gelu", ["x"], ["y"], domain=DOMAIN)
    contrib_parity(node, [_data(rng, shape, np.float32)])


@pytest.mark.parametrize("shape", SHAPES)
def test_bias_gelu(contrib_parity: Any, rng: np.random.Generator, shape: tuple[int, ...]) -> None:
    node = helper.make_node("BiasGelu", ["x", "b"], ["y"], domain=DOMAIN)
    contrib_parity(node, [_data(rng, shape, np.float32), _data(rng, shape[-1:], np.float32)])


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_fast_gelu(
    contrib_parity: Any, rng: np.random.Generator, shape: tuple[int, ...], with_bias: bool
) -> None:
    x = _data(rng, shape, np.float32)
    bias = _data(rng, shape[-1:], np.float32) if with_bias else None
    node = helper.make_node("FastGelu", ["x", "b" if with_bias else ""], ["y"], domain=DOMAIN)
    contrib_parity(node, [x, bias])


@pytest.mark.parametrize("alpha", [None, 1.0, -0.5])
def test_quick_gelu(contrib_parity: Any, rng: np.random.Generator, alpha: float | None) -> None:
    attrs: dict[str, Any] = {} if alpha is None else {"alpha": alpha}
    node = helper.make_node("QuickGelu", ["x"], ["y"], domain=DOMAIN, **attrs)
    contrib_parity(node, [_data(rng, (3, 4, 8), np.float32)])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_bias_add_against_its_formula(
    contrib_parity: Any, rng: np.random.Generator, dtype: Any
) -> None:
    """onnxruntime has BiasAdd on CUDA/ROCm only: X + bias + skip is its documented result."""
    x, skip = _data(rng, (2, 3, 8), dtype), _data(rng, (2, 3, 8), dtype)
    bias = _data(rng, (8,), dtype)
    node = helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain=DOMAIN)
    contrib_parity(node, [x, bias, skip], reference=lambda x, b, s: [x + b + s])


def test_float16_gelu_family_against_formulas(
    contrib_parity: Any, rng: np.random.Generator
) -> None:
    """onnxruntime's CPU provider runs the Gelu family in float32 only."""
    x = _data(rng, (2, 3, 8), np.float16)
    b = _data(rng, (8,), np.float16)
    gelu = helper.make_node("Gelu", ["x"], ["y"], domain=DOMAIN)
    contrib_parity(gelu, [x], reference=lambda x: [_gelu(x)])
    bias_gelu = helper.make_node("BiasGelu", ["x", "b"], ["y"], domain=DOMAIN)
    contrib_parity(bias_gelu, [x, b], reference=lambda x, b: [_gelu(x + b)])
    fast = helper.make_node("FastGelu", ["x", "b"], ["y"], domain=DOMAIN)
    contrib_parity(fast, [x, b], reference=lambda x, b: [_gelu_tanh(x + b)])


def test_bias_of_the_wrong_size_is_an_error_naming_the_node(rng: np.random.Generator) -> None:
    import turnout
    from turnout.graph.errors import InvalidArgument
    from turnout.tools.testing import one_node_model

    node = helper.make_node("BiasGelu", ["x", "b"], ["y"], domain=DOMAIN, name="bg")
    x, b = _data(rng, (2, 8), np.float32), _data(rng, (5,), np.float32)
    sess = turnout.InferenceSession(one_node_model(node, [x, b], 17).SerializeToString())
    with pytest.raises(InvalidArgument, match="bg"):
        sess.run(None, {"x": x, "b": b})
