"""QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
QLinearAveragePool, QLinearConcat, QLinearSoftmax and QLinearWhere (com.microsoft) against
onnxruntime's CPU kernels, uint8 and int8, with and without the optional zero points.

Outputs equal onnxruntime's exactly: its kernels round a float32 value computed as turnout's
are, half to even, except QLinearSoftmax, whose exponentials come from a fixed-point table and
may land one quantization step away."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN
from turnout.tools.testing import run_onnxruntime

DTYPES = [np.uint8, np.int8]


def _q(rng: np.random.Generator, shape: tuple[int, ...], dt: Any) -> np.ndarray:
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dt)


def _scale(rng: np.random.Generator, factor: float = 1.0) -> np.ndarray:
    return np.array(rng.uniform(0.005, 0.1) * factor, np.float32)


def _zp(rng: np.random.Generator, dt: Any) -> np.ndarray:
    lo, hi = (100, 156) if dt == np.uint8 else (-28, 28)
    return np.array(rng.integers(lo, hi), dt)


def _node(op: str, n_in: int, drop: tuple[int, ...] = (), **attrs: Any) -> Any:
    names = ["" if i in drop else f"i{i}" for i in range(n_in)]
    while names and not names[-1]:  # onnxruntime types a trailing "" input as a wrong one
        names.pop()
    return helper.make_node(op, names, ["y"], domain=DOMAIN, **attrs)


@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize(("a_shape", "b_shape"), [((2, 3, 8), (2, 3, 8)), ((4, 1, 5), (3, 1))])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dt", DTYPES)
def test_binary(
    contrib_parity: Any,
    rng: np.random.Generator,
    dt: Any,
    op: str,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    with_zp: bool,
) -> None:
    def zp() -> np.ndarray | None:
        return _zp(rng, dt) if with_zp else None

    inputs = [_q(rng, a_shape, dt), _scale(rng), zp(), _q(rng, b_shape, dt), _scale(rng), zp()]
    inputs += [_scale(rng, 4 if op == "QLinearMul" else 1), zp()]
    # onnxruntime's type inference refuses a QLinearAdd/Mul without A's and B's zero points
    inputs[2], inputs[5] = _zp(rng, dt), _zp(rng, dt)
    contrib_parity(_node(op, 8, () if with_zp else (7,)), inputs if with_zp else inputs[:7])


@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize(
    ("op", "attrs"),
    [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {}), ("QLinearLeakyRelu", {"alpha": 0.3})],
)
def test_unary(
    contrib_parity: Any,
    rng: np.random.Generator,
    op: str,
    attrs: dict[str, Any],
    dt: Any,
    with_zp: bool,
) -> None:
    y_scale = np.array(1 / 255 if op == "QLinearSigmoid" else 0.05, np.float32)
    inputs = [_q(rng, (3, 4, 16), dt), _scale(rng), _zp(rng, dt), y_scale, _zp(rng, dt)]
    if with_zp:
        contrib_parity(_node(op, 5, **attrs), inputs)
        return
    # onnxruntime aborts without the zero points: its result with explicit zeros is the oracle
    inputs[2] = inputs[4] = np.array(0, dt)
    want = run_onnxruntime(_node(op, 5, **attrs), inputs, 17)
    contrib_parity(_node(op, 5, (2, 4), **attrs), inputs[:4], reference=lambda *_: want)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("shape", [(1, 8, 5, 5), (2, 16, 7, 3), (2, 4, 9)])
@pytest.mark.parametrize("dt", DTYPES)
def test_global_average_pool(
    contrib_parity: Any,
    rng: np.random.Generator,
    dt: Any,
    shape: tuple[int, ...],
    channels_last: int,
) -> None:
    inputs = [_q(rng, shape, dt), _scale(rng), _zp(rng, dt), _scale(rng), _zp(rng, dt)]
    node = _node("QLinearGlobalAveragePool", 5, channels_last=channels_last)
    contrib_parity(node, inputs)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [2, 3], "pads": [1, 0, 1, 2], "count_include_pad": 1},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    ],
)
@pytest.mark.parametrize("dt", DTYPES)
def test_average_pool(
    contrib_parity: Any,
    rng: np.random.Generator,
    dt: Any,
    attrs: dict[str, Any],
    channels_last: int,
) -> None:
    shape = (2, 8, 8, 3) if channels_last else (2, 3, 8, 8)
    inputs = [_q(rng, shape, dt), _scale(rng), _zp(rng, dt), _scale(rng), _zp(rng, dt)]
    node = _node("QLinearAveragePool", 5, channels_last=channels_last, **attrs)
    contrib_parity(node, inputs)


@pytest.mark.parametrize("axis", [1, -1])
@pytest.mark.parametrize("dt", DTYPES)
def test_concat(contrib_parity: Any, rng: np.random.Generator, dt: Any, axis: int) -> None:
    y_scale, y_zp = _scale(rng), _zp(rng, dt)
    inputs: list[Any] = [y_scale, y_zp]
    for i, width in enumerate([3, 5, 2]):
        shape = (2, width, 4) if axis == 1 else (2, 4, width)
        # the middle input shares Y's parameters (copied as it is)
        params = [y_scale, y_zp] if i == 1 else [_scale(rng), _zp(rng, dt)]
        inputs += [_q(rng, shape, dt), *params]
    contrib_parity(_node("QLinearConcat", len(inputs), axis=axis), inputs)


@pytest.mark.parametrize(("opset", "axis"), [(13, -1), (13, 1), (12, 1), (11, -1)])
@pytest.mark.parametrize("dt", DTYPES)
def test_softmax(
    contrib_parity: Any, rng: np.random.Generator, dt: Any, opset: int, axis: int
) -> None:
    y_zp = np.array(0 if dt == np.uint8 else -128, dt)
    inputs = [_q(rng, (2, 6, 10), dt), _scale(rng), _zp(rng, dt), np.array(1 / 256, np.float32)]
    node = _node("QLinearSoftmax", 5, axis=axis, opset=opset)
    contrib_parity(node, [*inputs, y_zp], steps=1)


@pytest.mark.parametrize("dt", DTYPES)
def test_where(contrib_parity: Any, rng: np.random.Generator, dt: Any) -> None:
    cond = rng.random((3, 1, 6)) < 0.5
    inputs = [cond, _q(rng, (4, 6), dt), _scale(rng), _zp(rng, dt)]
    inputs += [_q(rng, (3, 4, 1), dt), _scale(rng), _zp(rng, dt), _scale(rng), _zp(rng, dt)]
    contrib_parity(_node("QLinearWhere", 9), inputs)


@pytest.mark.parametrize(("axes", "keepdims"), [([1], 1), ([0, 2], 0), ([-1], 1)])
@pytest.mark.parametrize("dt", DTYPES)
def test_reduce_mean_against_its_formula(
    contrib_parity: Any, rng: np.random.Generator, dt: Any, axes: list[int], keepdims: int
) -> None:
    """onnxruntime has no CPU kernel for QLinearReduceMean: its documented result is the
    float32 mean of the dequantized data, quantized (half to even, saturated)."""
    x, xs, xz, ys, yz = _q(rng, (3, 5, 4), dt), _scale(rng), _zp(rng, dt), _scale(rng), _zp(rng, dt)

    def reference(x: Any, xs: Any, xz: Any, ys: Any, yz: Any) -> list[np.ndarray]:
        xf = (x.astype(np.float64) - float(xz)) * float(xs)
        y = xf.mean(axis=tuple(axes), keepdims=bool(keepdims))
        info = np.iinfo(dt)
        return [np.clip(np.rint(y / float(ys)) + float(yz), info.min, info.max).astype(dt)]

    node = _node("QLinearReduceMean", 5, axes=axes, keepdims=keepdims)
    contrib_parity(node, [x, xs, xz, ys, yz], reference=reference, steps=1)


@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize("dt", DTYPES)
def test_mul_integer_against_its_formula(
    contrib_parity: Any, rng: np.random.Generator, dt: Any, with_zp: bool
) -> None:
    """onnxruntime has no CPU kernel for MulInteger: (A - a_zp) * (B - b_zp) in int32."""
    a, b = _q(rng, (2, 3, 4), dt), _q(rng, (3, 1), dt)
    az, bz = (_zp(rng, dt), _zp(rng, dt)) if with_zp else (None, None)

    def reference(a: Any, az: Any, b: Any, bz: Any = None) -> list[np.ndarray]:
        za = 0 if az is None else int(az)
        zb = 0 if bz is None else int(bz)
        return [((a.astype(np.int64) - za) * (b.astype(np.int64) - zb)).astype(np.int32)]

    node = _node("MulInteger", 4, () if with_zp else (1, 3))
    contrib_parity(node, [a, az, b, bz] if with_zp else [a, None, b], reference=reference)
