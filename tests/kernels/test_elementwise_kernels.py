"""CPU element-wise and activation kernels vs the official node tests and onnx.reference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    NodeCase,
    check_official_case,
    iter_node_cases,
    run_own_kernel,
    run_reference,
)

UNARY = {
    "Abs",
    "Neg",
    "Ceil",
    "Floor",
    "Round",
    "Sqrt",
    "Reciprocal",
    "Exp",
    "Log",
    "Tanh",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Erf",
    "Sign",
    "IsNaN",
    "IsInf",
    "Not",
    "BitwiseNot",
}
BINARY = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "BitShift",
    "And",
    "Or",
    "Xor",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
}
OTHER = {"Where", "Clip", "Sum", "Mean", "Max", "Min", "PRelu"}
ACTIVATIONS = {
    "Relu",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Gelu",
    "Mish",
    "ThresholdedRelu",
    "Swish",
    "Shrink",
}

CASES = list(iter_node_cases(UNARY | BINARY | OTHER | ACTIVATIONS))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_node_case(case: NodeCase) -> None:
    check_official_case(case)


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        lo = 0 if dt.kind == "u" else -20
        return rng.integers(lo, 20, size=shape).astype(dt)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) * 3).astype(dt)


# --------------------------------------------------------------------------------------------
# binary ops: dtypes and broadcasting


@pytest.mark.parametrize(
    "op", ["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "GreaterOrEqual"]
)
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float16, np.float64, np.int32, np.int64, np.uint8, np.int8]
)
def test_binary_broadcast_dtypes(
    op: str, dtype: type, rng: np.random.Generator, check: Any
) -> None:
    a = _rand(rng, (2, 3, 4), dtype)
    b = _rand(rng, (3, 1), dtype)
    if op == "Div" and np.dtype(dtype).kind in "iu":
        b[b == 0] = 3
    check(
        helper.make_node(op, ["a", "b"], ["y"]), [a, b], rtol=1e-3 if dtype == np.float16 else 1e-6
    )


def test_int_div_truncates_toward_zero(check: Any) -> None:
    a = np.array([-7, 7, -7, 7, -6, 0, -1], np.int64)
    b = np.array([2, -2, -2, 2, 3, -5, 4], np.int64)
    check(helper.make_node("Div", ["a", "b"], ["y"]), [a, b])


@pytest.mark.parametrize(
    "base,exp",
    [
        (np.float32, np.float32),
        (np.float32, np.int64),
        (np.float16, np.float32),
        (np.int32, np.int32),
        (np.int64, np.float32),
        (np.float64, np.int32),
    ],
)
def test_pow_keeps_base_dtype(base: type, exp: type, rng: np.random.Generator, check: Any) -> None:
    a = np.abs(_rand(rng, (3, 4), base)) + base(1)
    b = np.abs(_rand(rng, (4,), exp)) % exp(4)
    check(helper.make_node("Pow", ["a", "b"], ["y"]), [a, b], rtol=1e-3)
    check(helper.make_node("Pow", ["a", "b"], ["y"]), [a, np.array(2, exp)], rtol=1e-3)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.int64, np.float32, np.float64])
def test_mod_signs(fmod: int, dtype: type, rng: np.random.Generator, check: Any) -> None:
    a = _rand(rng, (5, 6), dtype)
    b = _rand(rng, (6,), dtype)
    b[b == 0] = 7
    node = helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)
    if fmod == 0 and np.dtype(dtype).kind == "f":
        # float fmod=0 is specified only from Mod-28 (onnx.reference lacks it): Python's % is
        # exactly "A - floor(A / B) * B with the sign of B"
        got = run_own_kernel(node, [a, b], 28)[0]
        want = np.array([[x % y for x, y in zip(row, b.tolist())] for row in a.tolist()], dtype)
        np.testing.assert_array_equal(got, want)
        return
    check(node, [a, b])


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bitshift(direction: str, dtype: type, rng: np.random.Generator, check: Any) -> None:
    a = rng.integers(0, 200, (4, 5)).astype(dtype)
    b = rng.integers(0, 7, (5,)).astype(dtype)
    check(helper.make_node("BitShift", ["a", "b"], ["y"], direction=direction), [a, b])


@pytest.mark.parametrize("op", ["And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_logic_and_bitwise(op: str, rng: np.random.Generator, check: Any) -> None:
    dt = np.bool_ if op in ("And", "Or", "Xor") else np.int16
    check(
        helper.make_node(op, ["a", "b"], ["y"]), [_rand(rng, (3, 1, 4), dt), _rand(rng, (5, 1), dt)]
    )


def test_equal_strings(check: Any) -> None:
    a = np.array([["a", "bc"], ["", "x"]], dtype=object)
    b = np.array(["a", "x"], dtype=object)
    check(helper.make_node("Equal", ["a", "b"], ["y"]), [a, b], opset=19)


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div", "Pow"])
@pytest.mark.parametrize("axis", [None, 0, 1, -2])
def test_legacy_broadcast_axis(op: str, axis: int | None, rng: np.random.Generator) -> None:
    a = np.abs(_rand(rng, (2, 3, 4), np.float32)) + 1
    kw = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
    b_shape = {None: (4,), 0: (2,), 1: (3, 4), -2: (3,)}[axis]
    b = np.abs(_rand(rng, b_shape, np.float32)) + 1
    node = helper.make_node(op, ["a", "b"], ["y"], **kw)
    got = run_own_kernel(node, [a, b], 6)[0]
    ax = a.ndim if axis is None else (axis % a.ndim)
    bb = b.reshape(b.shape + (1,) * (a.ndim - ax - b.ndim)) if axis is not None else b
    want = {
        "Add": np.add,
        "Mul": np.multiply,
        "Sub": np.subtract,
        "Div": np.divide,
        "Pow": np.power,
    }[op](a, bb)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.dtype == np.float32


# --------------------------------------------------------------------------------------------
# unary ops


@pytest.mark.parametrize("op", sorted(UNARY - {"Not", "BitwiseNot", "IsInf"}))
@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_unary_dtypes(op: str, dtype: type, rng: np.random.Generator, check: Any) -> None:
    x = _rand(rng, (3, 7), dtype)
    if op in ("Acosh",):
        x = np.abs(x) + dtype(1)
    if op in ("Asin", "Acos", "Atanh"):
        x = (x / dtype(10)).clip(-0.99, 0.99).astype(dtype)
    if op in ("Sqrt", "Log"):
        x = np.abs(x) + dtype(0.1)
    x[0, 0] = dtype(2.5)  # a half-way value for Round
    check(
        helper.make_node(op, ["x"], ["y"]),
        [x],
        opset=13 if op in ("Erf", "Sign", "IsNaN") else 21,
        rtol=2e-3 if dtype == np.float16 else 1e-7,
    )


def test_erf_matches_math_erf() -> None:
    x = np.concatenate(
        [np.linspace(-7, 7, 2001), [0.0, -0.0, 0.46875, 4.0, 30.0, -30.0, np.inf, -np.inf]]
    )
    got = run_own_kernel(helper.make_node("Erf", ["x"], ["y"]), [x], 13)[0]
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(got, want, rtol=2e-15, atol=1e-300)
    assert np.isnan(
        run_own_kernel(helper.make_node("Erf", ["x"], ["y"]), [np.array([np.nan])], 13)[0]
    ).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu_within_one_ulp_of_the_exact_value(dtype: type) -> None:
    """Gelu of narrow floats (numerics.gelu_erf: one erfc formula in float64 blocks) against
    x / 2 * erfc(-x / sqrt 2) from math.erfc, rounded: at most 1 ulp apart, the negative tail
    included (1 + erf(x) cancels there: the former form was off by up to 3% of a value). The
    length spans several blocks and a partial one."""
    x = np.concatenate(
        [np.linspace(-14, 14, 3 * 16384 + 77), [0.0, -0.0, 1e-30, -1e-30, -5.5, 3e4, -3e4]]
    ).astype(dtype)
    got = run_own_kernel(helper.make_node("Gelu", ["x"], ["y"]), [x], 20)[0]
    assert got.dtype == dtype and got.shape == x.shape
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    want = want.astype(dtype)
    bits = np.int32 if dtype == np.float32 else np.int16
    ulps = np.abs(got.view(bits).astype(np.int64) - want.view(bits).astype(np.int64))
    assert ulps.max() <= 1, x[np.argmax(ulps)]
    special = np.array([np.inf, -np.inf, np.nan], dtype)
    with np.errstate(invalid="ignore"):  # -inf * 0, as in x * (1 + erf(x))
        out = run_own_kernel(helper.make_node("Gelu", ["x"], ["y"]), [special], 20)[0]
    assert out[0] == np.inf and np.isnan(out[1:]).all()


@pytest.mark.parametrize("neg,pos", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_isinf_flags(neg: int, pos: int, check: Any) -> None:
    x = np.array([np.inf, -np.inf, np.nan, 0.0, 1e30], np.float32)
    check(helper.make_node("IsInf", ["x"], ["y"], detect_negative=neg, detect_positive=pos), [x])


# --------------------------------------------------------------------------------------------
# Where / Clip / variadic / PRelu


@pytest.mark.parametrize("dtype", [np.float32, np.int64, object])
def test_where_broadcast(dtype: type, rng: np.random.Generator, check: Any) -> None:
    c = rng.random((2, 1, 4)) < 0.5
    if dtype is object:
        x = np.array([["a", "b", "c", "d"]] * 3, dtype=object)
        y = np.array(["z"], dtype=object)
    else:
        x, y = _rand(rng, (3, 4), dtype), _rand(rng, (1,), dtype)
    check(helper.make_node("Where", ["c", "x", "y"], ["out"]), [c, x, y])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint64, np.int32])
@pytest.mark.parametrize("bounds", [(-2, 5), (3, 1), (None, 4), (-1, None)])
def test_clip_inputs(
    dtype: type, bounds: tuple[int | None, int | None], rng: np.random.Generator
) -> None:
    x = _rand(rng, (4, 5), dtype)
    names = ["x", "lo" if bounds[0] is not None else "", "hi" if bounds[1] is not None else ""]
    unsigned = np.dtype(dtype).kind == "u"
    inputs = [x] + [
        None if b is None else np.array(abs(b) if unsigned else b, dtype) for b in bounds
    ]
    node = helper.make_node("Clip", names, ["y"])
    got = run_own_kernel(node, inputs, 13)
    want = run_reference(node, inputs, 13)
    assert got[0].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got[0], want[0])


def test_clip_attributes_opset6(rng: np.random.Generator, check: Any) -> None:
    x = _rand(rng, (3, 4), np.float32)
    for kw in ({}, {"min": -1.0}, {"max": 0.5}, {"min": -0.5, "max": 0.5}):
        check(helper.make_node("Clip", ["x"], ["y"], **kw), [x], opset=6)


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_variadic(op: str, n: int, rng: np.random.Generator, check: Any) -> None:
    shapes = [(3, 4), (4,), (2, 1, 1), (1, 4)][:n]
    xs = [_rand(rng, s, np.float32) for s in shapes]
    xs[0][0, 0] = np.nan
    # onnx.reference's Mean accumulates in place and cannot broadcast beyond the first input
    (check.ort if op == "Mean" else check)(
        helper.make_node(op, [f"x{i}" for i in range(n)], ["y"]), xs, rtol=1e-6
    )
    if op in ("Max", "Min", "Sum"):
        check(
            helper.make_node(op, [f"x{i}" for i in range(n)], ["y"]),
            [_rand(rng, s, np.int32) for s in shapes],
        )


@pytest.mark.parametrize("slope_shape", [(1,), (3, 1, 1), (5,), (2, 3, 4, 5)])
def test_prelu_unidirectional(
    slope_shape: tuple[int, ...], rng: np.random.Generator, check: Any
) -> None:
    x = _rand(rng, (2, 3, 4, 5), np.float32)
    check(helper.make_node("PRelu", ["x", "s"], ["y"]), [x, _rand(rng, slope_shape, np.float32)])


# --------------------------------------------------------------------------------------------
# activations


ACT_ATTRS = [
    ("Relu", {}),
    ("LeakyRelu", {"alpha": 0.3}),
    ("Elu", {"alpha": 0.7}),
    ("Selu", {}),
    ("Selu", {"alpha": 2.0, "gamma": 0.5}),
    ("Celu", {"alpha": 2.0}),
    ("Sigmoid", {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}),
    ("Softplus", {}),
    ("Softsign", {}),
    ("Gelu", {}),
    ("Gelu", {"approximate": "tanh"}),
    ("Mish", {}),
    ("ThresholdedRelu", {"alpha": 0.5}),
    ("Swish", {}),
    ("Swish", {"alpha": 1.7}),
    ("Shrink", {"lambd": 1.5, "bias": 0.5}),
]


@pytest.mark.parametrize(
    "op,attrs", ACT_ATTRS, ids=[f"{o}-{i}" for i, (o, _) in enumerate(ACT_ATTRS)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_activation(
    op: str, attrs: dict[str, object], dtype: type, rng: np.random.Generator, check: Any
) -> None:
    x = _rand(rng, (4, 6), dtype)
    x[0, :4] = [-60, 60, 0, -0.0] if dtype != np.float16 else [-11, 11, 0, -0.0]
    check(
        helper.make_node(op, ["x"], ["y"], **attrs),
        [x],
        opset=24,
        rtol=4e-3 if dtype == np.float16 else 1e-5,
        atol=1e-3 if dtype == np.float16 else 1e-6,
    )


def test_sigmoid_is_stable_for_extremes(check: Any) -> None:
    x = np.array([-1000.0, -100.0, 0.0, 100.0, 1000.0], np.float32)
    y = run_own_kernel(helper.make_node("Sigmoid", ["x"], ["y"]), [x], 13)[0]
    assert np.isfinite(y).all() and y.dtype == np.float32
    check(helper.make_node("Sigmoid", ["x"], ["y"]), [x], opset=13)


@pytest.mark.parametrize("size", [7, 5000])  # either side of the sign-bit merge's threshold
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, "bfloat16"])
def test_logistic_is_the_where_form_bitwise(
    size: int, dtype: Any, rng: np.random.Generator
) -> None:
    """The in-place sigmoid (np.where, or a merge by x's sign bit on large inputs) gives the
    bits of `where(x >= 0, 1 / (1 + e), e / (1 + e))`, signed zeros and non-finite included."""
    import ml_dtypes

    from turnout.sdk.semantics.numerics import logistic

    dt = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    x = (rng.standard_normal(size) * 20).astype(dt)
    x[:6] = np.array([-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf]).astype(dt)
    for v in (x, x[::2], x.reshape(-1, 1)[1:]):
        with np.errstate(all="ignore"):
            e = np.exp(-np.abs(v))
            one = dt.type(1)
            want = np.where(v >= 0, one / (one + e), e / (one + e))
            got = logistic(v)
        assert got.dtype == dt and got.shape == v.shape
        g, w = got.astype(np.float64), want.astype(np.float64)  # exact for every width here
        np.testing.assert_array_equal(g, w)  # NaN matches NaN
        assert (np.signbit(g) == np.signbit(w))[~np.isnan(w)].all()


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_int_activations(dtype: type, rng: np.random.Generator, check: Any) -> None:
    x = _rand(rng, (3, 5), dtype)
    check(helper.make_node("Relu", ["x"], ["y"]), [x], opset=14)
    check(helper.make_node("Shrink", ["x"], ["y"], lambd=2.0, bias=1.0), [x], opset=9)


# --------------------------------------------------------------------------------------------
# errors


def test_broadcast_mismatch_is_invalid_argument() -> None:
    for op in ("Add", "Equal", "Pow", "BitwiseAnd"):
        dt = np.int32 if op == "BitwiseAnd" else np.float32
        with pytest.raises(InvalidArgument, match="broadcast"):
            run_own_kernel(
                helper.make_node(op, ["a", "b"], ["y"]), [np.zeros((2, 3), dt), np.zeros((4,), dt)]
            )
    with pytest.raises(InvalidArgument):
        run_own_kernel(
            helper.make_node("Where", ["c", "x", "y"], ["o"]),
            [np.zeros((2,), bool), np.zeros((3,), np.float32), np.zeros((3,), np.float32)],
        )
    with pytest.raises(InvalidArgument):
        run_own_kernel(
            helper.make_node("Sum", ["a", "b"], ["y"]),
            [np.zeros((2,), np.float32), np.zeros((3,), np.float32)],
        )


def test_prelu_slope_must_not_grow_x() -> None:
    with pytest.raises(InvalidArgument, match="PRelu"):
        run_own_kernel(
            helper.make_node("PRelu", ["x", "s"], ["y"]),
            [np.ones((3,), np.float32), np.ones((2, 3), np.float32)],
        )


def test_clip_bounds_must_be_scalars() -> None:
    with pytest.raises(InvalidArgument, match="scalar"):
        run_own_kernel(
            helper.make_node("Clip", ["x", "lo"], ["y"]),
            [np.ones((3,), np.float32), np.zeros((2,), np.float32)],
            13,
        )


def test_gelu_bad_approximate() -> None:
    with pytest.raises(InvalidArgument, match="approximate"):
        run_own_kernel(
            helper.make_node("Gelu", ["x"], ["y"], approximate="fast"),
            [np.ones((3,), np.float32)],
            20,
        )
