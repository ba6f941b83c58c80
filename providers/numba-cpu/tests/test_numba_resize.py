"""numba Resize against onnx.reference over every coordinate_transformation_mode and nearest_mode
it claims, up- and downsampling, scales and sizes, axes and keep_aspect_ratio_policy; against
turnout's CPU kernel (whose semantics it follows) on the same grid; and the declines.

Where onnx.reference departs from the ONNX text it is not used: for align_corners and
pytorch_half_pixel it takes the unrounded scale x input length as the output length, so those
two modes are held to it only where that product is a whole number (onnxruntime and the CPU
kernel use the output length, and agree with this kernel everywhere); it has no
tf_half_pixel_for_nn (gone from opset 18), which is held to onnxruntime at opset 13.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from turnout.tools.concurrency import run_from_threads
from turnout.tools.testing import cpu_session, provider_session
from turnout_numba.kernels.resize import COORDINATE_MODES, NEAREST_MODES

# (input shape, scales): whole-number products first, then fractional ones
WHOLE = [((1, 2, 4, 5), [1, 1, 2, 2]), ((1, 3, 6, 4), [1, 1, 0.5, 0.5]),
         ((2, 1, 3, 3), [1, 1, 3, 1]), ((1, 1, 1, 4), [1, 1, 2, 0.25])]  # fmt: skip
FRACTIONAL = [((1, 1, 3, 7), [1, 1, 1.7, 0.6]), ((2, 3, 5), [1, 0.5, 2.5]),
              ((1, 1, 5, 9), [1, 1, 0.8, 1.3])]  # fmt: skip
SPEC_ONLY = ("align_corners", "pytorch_half_pixel")


def _model(
    x: np.ndarray,
    scales: Any = None,
    sizes: Any = None,
    opset: int = 19,
    known: bool = True,
    **attrs: Any,
) -> onnx.ModelProto:
    """Resize(x, "", scales, sizes) with scales/sizes as initializers."""
    inits, names = [], ["x", ""]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.asarray(scales, np.float32), "scales"))
        names.append("scales")
    else:
        names.append("")
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
        names.append("sizes")
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    g = helper.make_graph(
        [helper.make_node("Resize", names, ["y"], name="my_resize", **attrs)],
        "g",
        [helper.make_tensor_value_info("x", elem, list(x.shape) if known else None)],
        [helper.make_tensor_value_info("y", elem, None)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _numba(model: onnx.ModelProto, x: np.ndarray, threads: int = 1) -> np.ndarray:
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    got = sess.run(None, {"x": x})[0]
    assert np.array_equal(sess.run(None, {"x": x})[0], got)  # the kept plan gives the same
    return got  # type: ignore[no-any-return]


def _same(got: np.ndarray, want: np.ndarray, linear: bool) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if linear:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def _grid() -> list[tuple[str, str, str]]:
    out = [("nearest", c, n) for c, n in itertools.product(COORDINATE_MODES, NEAREST_MODES)]
    return out + [("linear", c, "round_prefer_floor") for c in COORDINATE_MODES]


@pytest.mark.parametrize(("mode", "coord", "nearest"), _grid())
def test_every_mode_matches_reference_and_cpu(
    rng: np.random.Generator, mode: str, coord: str, nearest: str
) -> None:
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "nearest_mode": nearest}
    opset = 13 if coord == "tf_half_pixel_for_nn" else 19
    for k, (shape, scales) in enumerate(WHOLE + FRACTIONAL):
        x = rng.standard_normal(shape).astype(np.float32)
        model = _model(x, scales, opset=opset, **attrs)
        got = _numba(model, x, threads=k % 2)
        _same(got, cpu_session(model).run(None, {"x": x})[0], mode == "linear")
        if coord == "tf_half_pixel_for_nn":
            if k < len(WHOLE):
                ort = pytest.importorskip("onnxruntime")
                want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
                _same(got, want, mode == "linear")
        elif k < len(WHOLE) or coord not in SPEC_ONLY:
            _same(got, ReferenceEvaluator(model).run(None, {"x": x})[0], mode == "linear")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize(
    ("shape", "sizes", "policy"),
    [
        ((1, 2, 4, 5), [1, 2, 8, 10], "stretch"),
        ((1, 1, 5, 4), [1, 1, 3, 7], "stretch"),
        ((1, 1, 6, 4), [1, 1, 9, 9], "not_larger"),
        ((1, 1, 6, 4), [1, 1, 9, 9], "not_smaller"),
    ],
)
def test_sizes_and_aspect_policies(
    rng: np.random.Generator,
    mode: str,
    coord: str,
    shape: tuple[int, ...],
    sizes: list[int],
    policy: str,
) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    model = _model(x, sizes=sizes, mode=mode, coordinate_transformation_mode=coord,
                   keep_aspect_ratio_policy=policy)  # fmt: skip
    got = _numba(model, x)
    _same(got, cpu_session(model).run(None, {"x": x})[0], mode == "linear")
    if policy == "stretch" or coord not in SPEC_ONLY:  # 2.25 x 6 is 13.5 for the reference
        _same(got, ReferenceEvaluator(model).run(None, {"x": x})[0], mode == "linear")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize(
    ("shape", "axes", "scales"),
    [
        ((1, 6, 5, 3), [1, 2], [2.0, 2.0]),  # NHWC: H is not one of the last two axes
        ((1, 2, 3, 4, 5), [2, 3, 4], [2.0, 2.0, 2.0]),  # a volume
        ((7,), [0], [1.5]),
        ((3, 4), [-1], [2.0]),
    ],
)
def test_axes_outside_the_last_two(
    rng: np.random.Generator, mode: str, shape: tuple[int, ...], axes: list[int], scales: Any
) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    got = _numba(_model(x, scales, mode=mode, axes=axes), x)
    # (onnx.reference takes no negative axes)
    ref = _model(x, scales, mode=mode, axes=[a % len(shape) for a in axes])
    _same(got, ReferenceEvaluator(ref).run(None, {"x": x})[0], mode == "linear")


def test_exclude_outside(rng: np.random.Generator) -> None:
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    for scales in ([1, 1, 2, 2], [1, 1, 0.6, 1.5]):
        model = _model(x, scales, mode="linear", exclude_outside=1)
        got = _numba(model, x)
        _same(got, ReferenceEvaluator(model).run(None, {"x": x})[0], True)


@pytest.mark.parametrize(
    "dtype", [np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64, np.bool_]
)
def test_nearest_moves_any_fixed_width_dtype(rng: np.random.Generator, dtype: Any) -> None:
    x = (rng.standard_normal((1, 3, 4, 5)) * 50).astype(dtype)
    model = _model(x, [1, 1, 2, 1.5])
    got = _numba(model, x)
    _same(got, cpu_session(model).run(None, {"x": x})[0], False)
    if dtype != np.bool_:  # (onnx.reference computes in floats, which bool is not)
        _same(got, ReferenceEvaluator(model).run(None, {"x": x})[0], False)


def test_linear_float64(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 7, 5))
    model = _model(x, [1, 1, 2, 2], mode="linear")
    got = _numba(model, x)
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-12)


@pytest.mark.parametrize(
    ("shape", "scales"),
    [((1, 256, 20, 20), [1, 1, 2, 2]), ((1, 128, 40, 40), [1, 1, 2, 2])],
)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_detection_head_upsampling(
    rng: np.random.Generator, shape: tuple[int, ...], scales: Any, mode: str
) -> None:
    """FPN / YOLO necks: NCHW maps upsampled by 2, in a session with threads too."""
    x = rng.standard_normal(shape).astype(np.float32)
    model = _model(x, scales, mode=mode)
    got = _numba(model, x, threads=0)
    _same(got, cpu_session(model).run(None, {"x": x})[0], mode == "linear")


def test_shape_unknown_at_creation_and_changing(rng: np.random.Generator) -> None:
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    model = _model(x, [1, 1, 2, 2], mode="linear", known=False)
    sess = provider_session(model, "NumbaExecutionProvider")
    for shape in [(1, 2, 3, 4), (2, 1, 5, 2), (1, 2, 3, 4)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = sess.run(None, {"x": x})[0]
        _same(got, ReferenceEvaluator(model).run(None, {"x": x})[0], True)


def test_identity_resize_returns_a_copy(rng: np.random.Generator) -> None:
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    got = _numba(_model(x, [1, 1, 1, 1]), x)
    np.testing.assert_array_equal(got, x)
    assert not np.shares_memory(got, x)


@pytest.mark.parametrize(
    "attrs",
    [
        {"mode": "cubic"},
        {"mode": "linear", "antialias": 1},
        {"coordinate_transformation_mode": "tf_crop_and_resize"},
    ],
)
def test_declines_run_on_numpy(rng: np.random.Generator, attrs: dict[str, Any]) -> None:
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    model = _model(x, [1, 1, 2, 2], **attrs)
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        model.graph.initializer.append(
            numpy_helper.from_array(np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32), "roi")
        )
        model.graph.node[0].input[1] = "roi"
    sess = provider_session(model, "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numpy"]
    x16 = x.astype(np.float16)
    sess = provider_session(_model(x16, [1, 1, 2, 2], mode="linear"), "NumbaExecutionProvider")
    assert [a.source for a in sess.partition_report().assignments] == ["numpy"]


def test_shared_session_with_changing_shapes_is_thread_safe(rng: np.random.Generator) -> None:
    """Concurrent runs with different input shapes each get their own shape's plan."""
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    sess = provider_session(_model(x, [1, 1, 2, 2], mode="linear", known=False),
                            "NumbaExecutionProvider")  # fmt: skip
    shapes = [(1, 2, 3, 4), (1, 1, 5, 2), (2, 2, 2, 3)]
    feeds = [{"x": rng.standard_normal(s).astype(np.float32)} for s in shapes]
    result = run_from_threads(sess, feeds, threads=4, runs=100, switch_interval=1e-5)
    assert result.clean, result
