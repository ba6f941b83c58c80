"""Regressions in the CPU and numba kernels (issue 11, item 4), each held to onnxruntime.

- Reduce* with `noop_with_empty_axes=1` and no axes reduce over no axes: the elementwise part
  still applies (ReduceSumSquare squares, ReduceL1/L2 take |x|, ReduceLogSum the log); they
  passed the input through unchanged.
- MaxPool and ArgMax/ArgMin with NaN follow onnxruntime's scan (the first tap inside the
  input, then strictly greater values only), so NaN wins only in first place; they propagated
  every NaN (numpy's maximum/argmax). ReduceMax/ReduceMin/GlobalMaxPool keep propagating NaN as
  onnx.reference does: onnxruntime's vectorized loops give an answer that depends on where the
  NaN falls in a SIMD register (see `test_nan_reductions_propagate`).
- Pool output shapes for every auto_pad x ceil_mode combination, 1-D and 2-D.

Every case runs on turnout's own CPU kernel and on the numba provider (a session on it alone).
"""

from __future__ import annotations

import importlib.util
import itertools
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from turnout.tools.testing import (
    one_node_model,
    provider_session,
    run_onnxruntime,
    run_own_kernel,
    run_reference,
)

NUMBA = "NumbaExecutionProvider"
PROVIDERS = [
    "cpu",
    pytest.param(
        NUMBA,
        marks=pytest.mark.skipif(
            importlib.util.find_spec("turnout_numba") is None,
            reason="turnout-numba is not installed",
        ),
    ),
]


def _rng(*key: Any) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _run(provider: str, node: onnx.NodeProto, inputs: Sequence[Any], opset: int) -> list[Any]:
    """The node's outputs from turnout's own CPU kernel, or from a session on `provider`."""
    if provider == "cpu":
        return run_own_kernel(node, inputs, opset)
    sess = provider_session(one_node_model(node, inputs, opset), provider)
    feeds = {n: v for n, v in zip(node.input, inputs) if n}
    with np.errstate(all="ignore"):
        return list(sess.run(None, feeds))


def _assert_same(want: Sequence[Any], got: Sequence[Any], what: str, rtol: float = 1e-5) -> None:
    """Same count, dtypes and shapes; values close in float64, NaN where NaN is expected."""
    assert len(got) == len(want), what
    for i, (w, g) in enumerate(zip(want, got)):
        assert (g.dtype, g.shape) == (w.dtype, w.shape), (
            f"{what} output {i}: {g.dtype}{g.shape}, expected {w.dtype}{w.shape}"
        )
        np.testing.assert_allclose(
            g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=1e-6, err_msg=what
        )


# ------------------------------------------------------------------------------------------
# Reduce* with empty axes

# every Reduce* op of the default domain, from onnx's schemas
REDUCE = sorted(
    {s.name for s in onnx.defs.get_all_schemas() if s.domain == "" and s.name.startswith("Reduce")}
)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_reduce_sum_square_noop_still_squares(provider: str) -> None:
    x = np.array([1.5, -2.0, 3.0, 0.5], np.float32)
    node = helper.make_node("ReduceSumSquare", ["x", "axes"], ["y"], noop_with_empty_axes=1)
    inputs = [x, np.array([], np.int64)]
    want = run_onnxruntime(node, inputs, 18)
    _assert_same(run_reference(node, inputs, 18), want, "onnx.reference against onnxruntime")
    _assert_same(want, _run(provider, node, inputs, 18), "ReduceSumSquare noop")


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("op", REDUCE)
def test_reduce_empty_axes(provider: str, op: str) -> None:
    """Axes missing or an empty tensor, noop_with_empty_axes 0/1, keepdims 0/1, at opsets 13
    and 18 (axes an attribute before its since-version: then "no axes" means all axes)."""
    x = _rng(op).standard_normal((2, 3, 4)).astype(np.float32)
    if op == "ReduceLogSum":
        x = np.abs(x) + np.float32(0.5)  # keep the reduce-all case finite
    since = 13 if op == "ReduceSum" else 18
    for opset, empty, noop, keep in itertools.product((13, 18), ("missing", "[]"), (0, 1), (0, 1)):
        axes_input = opset >= since
        if not axes_input and (empty == "[]" or noop):
            continue  # no axes input, no noop_with_empty_axes attribute
        attrs = {"keepdims": keep, **({"noop_with_empty_axes": noop} if axes_input else {})}
        names, inputs = (
            (["x"], [x]) if empty == "missing" else (["x", "a"], [x, np.array([], np.int64)])
        )
        node = helper.make_node(op, names, ["y"], **attrs)
        what = f"{op} opset {opset} axes {empty} {attrs}"
        _assert_same(
            run_onnxruntime(node, inputs, opset), _run(provider, node, inputs, opset), what
        )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_reduce_noop_special_values_and_dtypes(provider: str) -> None:
    """The no-op keeps each op's elementwise rule at the edges: inf, NaN, -0, big values
    (ReduceLogSumExp gives x back, not log(exp(x)) = inf), integers, float16, empty input."""
    inputs_by_kind = {
        "special": np.array([[100.0, -100, np.inf, -np.inf, np.nan, 0, -0.0, 3]], np.float32),
        "float16": np.array([[1.5, -2, 3, 0.5]], np.float16),
        "float64": np.array([[1.5, -2, 3, 0.5]], np.float64),
        "int32": np.array([[3, -2, 7]], np.int32),
        "empty": np.zeros((0, 3), np.float32),
    }
    for op, (kind, x), keep in itertools.product(REDUCE, inputs_by_kind.items(), (0, 1)):
        if kind == "int32" and op in ("ReduceLogSum", "ReduceLogSumExp", "ReduceL2"):
            continue  # onnxruntime has no int32 kernel for these
        node = helper.make_node(op, ["x", "a"], ["y"], noop_with_empty_axes=1, keepdims=keep)
        inputs = [x, np.array([], np.int64)]
        with np.errstate(all="ignore"):
            want = run_onnxruntime(node, inputs, 18)
        got = _run(provider, node, inputs, 18)
        _assert_same(want, got, f"{op} on {kind}, keepdims {keep}", rtol=1e-3)


# ------------------------------------------------------------------------------------------
# NaN in max-like ops


def _with_nan(rng: np.random.Generator, shape: tuple[int, ...], dt: Any) -> np.ndarray:
    x = rng.integers(-3, 4, shape).astype(dt)  # small integers: ties, so indices are tested too
    x[rng.random(shape) < 0.3] = np.nan
    return x


def _pool_nan_cases() -> list[tuple[str, dict[str, Any], tuple[int, ...]]]:
    cases: list[tuple[str, dict[str, Any], tuple[int, ...]]] = []
    for nd in (1, 2):
        sp = (9,) if nd == 1 else (6, 7)
        cases += [
            (f"{nd}d k3", {"kernel_shape": [3] * nd}, sp),
            (
                f"{nd}d k2 s2 ceil",
                {"kernel_shape": [2] * nd, "strides": [2] * nd, "ceil_mode": 1},
                sp,
            ),
            (f"{nd}d k3 pads", {"kernel_shape": [3] * nd, "pads": [2] * nd + [1] * nd}, sp),
            (f"{nd}d k2 dil2", {"kernel_shape": [2] * nd, "dilations": [2] * nd}, sp),
            (
                f"{nd}d k3 same_lower s2",
                {"kernel_shape": [3] * nd, "strides": [2] * nd, "auto_pad": "SAME_LOWER"},
                sp,
            ),
        ]
    return cases


POOL_NAN_CASES = _pool_nan_cases()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("case", POOL_NAN_CASES, ids=[c[0] for c in POOL_NAN_CASES])
def test_max_pool_nan_with_indices(case: Any, dtype: Any) -> None:
    """With an Indices output onnxruntime always runs its scalar loop: the rule to match."""
    name, attrs, sp = case
    x = _with_nan(_rng(name, dtype), (2, 2, *sp), dtype)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    got = run_own_kernel(node, [x], 12)
    want = run_onnxruntime(node, [x], 12)
    _assert_same(want, got, f"MaxPool {name} {attrs}")
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case", POOL_NAN_CASES, ids=[c[0] for c in POOL_NAN_CASES])
def test_max_pool_nan(case: Any, provider: str) -> None:
    """Y alone: onnxruntime's scalar loop runs for float64 and for dilated float32 pools, and
    the result equals Y of the Indices form. float32 without dilations goes to MLAS, whose NaN
    handling follows SIMD operand order (its 1-D kernel skips NaN even in first place; the 2-D
    vector kernel does not), so there Y is held to onnxruntime's Indices form."""
    name, attrs, sp = case
    for dt in (np.float64, np.float32):
        x = _with_nan(_rng(name, dt), (2, 2, *sp), dt)
        node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
        want = run_onnxruntime(helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs), [x], 12)
        if dt == np.float64 or "dilations" in attrs:
            _assert_same(run_onnxruntime(node, [x], 12), want[:1], "onnxruntime Y vs Y of Y,I")
        _assert_same(want[:1], _run(provider, node, [x], 12), f"MaxPool {name} {dt.__name__}")


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
def test_arg_max_min_nan(op: str, dtype: Any) -> None:
    """onnxruntime's ArgMax/ArgMin start at index 0 and move to a strictly better value (an
    equal one too with select_last_index): NaN counts only at index 0. -inf rows check that a
    skipped NaN is not mistaken for an extreme."""
    rng = _rng(op, dtype)
    x = _with_nan(rng, (4, 6, 3), dtype)
    x[0, :, 0] = -np.inf if op == "ArgMax" else np.inf
    x[0, 2, 0] = np.nan
    x[1, 0, :] = np.nan
    for axis, keep, last in itertools.product((0, 1, -1), (0, 1), (0, 1)):
        node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keep, select_last_index=last)
        want = run_onnxruntime(node, [x], 13)
        got = run_own_kernel(node, [x], 13)
        assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
        np.testing.assert_array_equal(
            got[0], want[0], err_msg=f"axis {axis} keep {keep} last {last}"
        )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_nan_reductions_propagate(provider: str) -> None:
    """ReduceMax/ReduceMin/GlobalMaxPool give NaN for any NaN, as onnx.reference does.
    onnxruntime is no anchor here: its Eigen/MLAS loops keep or drop a NaN by its lane, e.g.
    ReduceMax of [0.95, -0.7, nan, -0.62, nan, -2.33, nan] is 0.947 but of
    [1.37, nan, 0.35, nan, 0.09, -0.74, nan] is nan (onnxruntime 1.32, x86-64)."""
    x = _with_nan(_rng("reductions"), (2, 3, 5, 4), np.float32)
    x[0, 0] = 1.0  # a row without NaN
    cases = [
        (helper.make_node("ReduceMax", ["x"], ["y"], axes=[2, 3], keepdims=0), 13),
        (helper.make_node("ReduceMin", ["x"], ["y"], axes=[3], keepdims=1), 13),
        (helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0), 13),
        (helper.make_node("GlobalMaxPool", ["x"], ["y"]), 13),
    ]
    for node, opset in cases:
        want = run_reference(node, [x], opset)
        _assert_same(want, _run(provider, node, [x], opset), f"{node.op_type}")


# ------------------------------------------------------------------------------------------
# Pool output shapes

POOLS = {"MaxPool": 12, "AveragePool": 19, "LpPool": 18}  # opsets with ceil_mode and dilations


def _shape_cases(op: str) -> list[dict[str, Any]]:
    """Sizes, kernels and strides where floor and ceil differ and a last window would start in
    the end padding. SAME_* with dilations is left out: onnxruntime sizes its pads from the
    undilated kernel (out = ceil(in / stride) then fails, e.g. in 1, kernel 2, dilation 2
    gives an empty output), against the ONNX spec; and SAME with a kernel smaller than the
    stride makes negative pads, which onnxruntime rejects for MaxPool."""
    cases = []
    for auto_pad, ceil, (n, k, s, d) in itertools.product(
        ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"),
        (0, 1),
        [(5, 2, 2, 1), (6, 2, 3, 1), (7, 3, 2, 1), (10, 3, 3, 1), (9, 2, 2, 2), (12, 4, 3, 1)],
    ):
        if auto_pad.startswith("SAME") and (d > 1 or k < s):
            continue
        attrs: dict[str, Any] = {"kernel_shape": [k], "strides": [s], "ceil_mode": ceil}
        attrs["auto_pad"] = auto_pad
        if d > 1:
            attrs["dilations"] = [d]
        if auto_pad == "NOTSET":
            attrs["pads"] = [1, k - 1]
        cases.append({"n": n, **attrs})
    return cases


def _as_2d(attrs: dict[str, Any], axis: int) -> dict[str, Any]:
    """The 1-D pool's attributes on spatial `axis` of a 2-D pool; the other axis has kernel 2,
    stride 1 and no pads."""
    fixed = {"kernel_shape": 2, "strides": 1, "dilations": 1}
    out = dict(attrs)
    for key, other in fixed.items():
        if key in attrs:
            out[key] = [attrs[key][0], other] if axis == 0 else [other, attrs[key][0]]
    if "pads" in attrs:
        b, e = attrs["pads"]
        out["pads"] = [b, 0, e, 0] if axis == 0 else [0, b, 0, e]
    return out


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("op", list(POOLS))
def test_pool_output_shapes(op: str, provider: str) -> None:
    """Every auto_pad x ceil_mode, 1-D and on either axis of a 2-D pool, against onnxruntime:
    shapes and values."""
    rng = _rng(op, "shapes")
    for case in _shape_cases(op):
        n = case.pop("n")
        variants = [
            (case, (1, 2, n)),
            (_as_2d(case, 0), (1, 2, n, 4)),
            (_as_2d(case, 1), (1, 2, 4, n)),
        ]
        for attrs, shape in variants:
            x = rng.standard_normal(shape).astype(np.float32)
            node = helper.make_node(op, ["x"], ["y"], **attrs)
            want = run_onnxruntime(node, [x], POOLS[op])
            got = _run(provider, node, [x], POOLS[op])
            _assert_same(want, got, f"{op} {shape} {attrs}", rtol=1e-4)
