"""turnout's own conv/pool/norm/resize kernels vs the ONNX node tests, onnx.reference and ORT."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import (
    check_official_case,
    iter_node_cases,
    run_own_kernel,
    run_reference,
)

OPS = {
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool",
    "MaxUnpool", "MaxRoiPool", "RoiAlign",
    "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
    "LRN", "RMSNormalization", "MeanVarianceNormalization", "LpNormalization",
    "Resize", "Upsample", "GridSample", "AffineGrid", "Col2Im",
}  # fmt: skip

# The official data for these follows onnx.reference, which divides by the *float* output
# length (scale * in) for align_corners; the spec's length_resized and onnxruntime use the
# integer output length (checked against ORT in test_resize_align_corners_fractional_scale).
EXCLUDED = {
    "test_resize_downsample_scales_linear_align_corners",
    "test_resize_downsample_scales_cubic_align_corners",
}
CASES = [c for c in iter_node_cases(OPS) if c.name not in EXCLUDED]

# conv, pool and norm kernels sum many terms in another order than the references
pytestmark = pytest.mark.kernel_check(rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_node_case(case: Any) -> None:
    check_official_case(case)


def randf(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# Conv family

CONV_CASES = [
    # (spatial, C, M, kernel, attrs)
    ((9,), 3, 4, (3,), {"strides": [2], "pads": [1, 2]}),
    ((8, 7), 4, 6, (3, 3), {"group": 2, "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
    ((8, 7), 4, 4, (3, 3), {"group": 4, "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((7, 6), 2, 3, (2, 3), {"strides": [2, 1], "auto_pad": "SAME_LOWER"}),
    ((7, 6), 2, 3, (3, 2), {"strides": [1, 2], "auto_pad": "VALID"}),
    ((5, 6, 4), 2, 3, (2, 3, 2), {"strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]}),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=range(len(CONV_CASES)))
@pytest.mark.parametrize("bias", [False, True])
def test_conv_random(
    case: Any, bias: bool, rng: np.random.Generator, node: Any, check: Any
) -> None:
    spatial, c, m, k, attrs = case
    g = attrs.get("group", 1)
    x = randf(rng, 2, c, *spatial)
    w = randf(rng, m, c // g, *k)
    ins = [x, w] + ([randf(rng, m)] if bias else [])
    check.ort(node("Conv", ["x", "w", "b"][: len(ins)], **attrs), ins, 11)


def test_conv_float64_and_float16(rng: np.random.Generator, node: Any, check: Any) -> None:
    w = randf(rng, 3, 2, 3, 3, dtype=np.float64)
    check(
        node("Conv", ["x", "w"], pads=[1, 1, 1, 1]), [randf(rng, 1, 2, 5, 5, dtype=np.float64), w]
    )
    x16 = randf(rng, 1, 2, 5, 5, dtype=np.float16)
    got = check.ort(node("Conv", ["x", "w"]), [x16, w.astype(np.float16)], 11, rtol=1e-2, atol=1e-2)
    assert got[0].dtype == np.float16


CONVT_CASES = [
    ((5,), 2, 3, (3,), {"strides": [2], "output_padding": [1]}),
    ((4, 5), 4, 2, (3, 3), {"group": 2, "strides": [2, 3], "pads": [1, 0, 0, 2]}),
    ((4, 5), 2, 3, (3, 2), {"dilations": [2, 1], "strides": [1, 2]}),
    ((4, 5), 2, 3, (3, 3), {"strides": [2, 2], "output_shape": [9, 11]}),
    ((4, 5), 2, 3, (3, 3), {"strides": [2, 2], "output_shape": [8, 10], "auto_pad": "SAME_UPPER"}),
    ((4, 5), 2, 3, (3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((4, 5), 2, 3, (4, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((3, 4, 2), 2, 2, (2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),
]


@pytest.mark.parametrize("case", CONVT_CASES, ids=range(len(CONVT_CASES)))
def test_conv_transpose_random(case: Any, rng: np.random.Generator, node: Any, check: Any) -> None:
    spatial, c, mg, k, attrs = case
    x = randf(rng, 2, c, *spatial)
    w = randf(rng, c, mg, *k)
    b = randf(rng, mg * attrs.get("group", 1))
    check.ort(node("ConvTranspose", ["x", "w", "b"], **attrs), [x, w, b], 11)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_conv_integer_and_qlinear(dt: Any, rng: np.random.Generator, node: Any, check: Any) -> None:
    info = np.iinfo(dt)
    x = rng.integers(info.min, info.max, (1, 2, 6, 5)).astype(dt)
    w = rng.integers(info.min, info.max, (3, 2, 3, 3)).astype(dt)
    xz, wz = np.array(3, dt), np.array(2, dt)
    check.ort(node("ConvInteger", ["x", "w", "xz", "wz"], pads=[1, 1, 1, 1]), [x, w, xz, wz], 11)
    ins = [x, np.float32(0.05), xz, w, np.float32(0.02), wz, np.float32(0.3), np.array(5, dt)]
    ins.append(rng.integers(-100, 100, 3).astype(np.int32))
    n = node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], strides=[2, 1])
    got = run_own_kernel(n, ins, 11)
    expected = run_reference(n, ins, 11)
    assert got[0].dtype == dt
    assert np.abs(got[0].astype(np.int32) - expected[0].astype(np.int32)).max() <= 1


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_conv_integer_is_exact_over_many_channels(
    dt: Any, group: int, rng: np.random.Generator, node: Any
) -> None:
    """Extreme codes over 64 input channels of a 3x3 window (576 products a sum: past what one
    float32 product holds exactly, so the channels run in parts), per-channel weight zero
    points, padding: equal to onnx.reference."""
    info = np.iinfo(dt)
    x = rng.choice(np.array([info.min, info.max], dt), (1, 64, 6, 5))
    x[:, :, 1:-1, 1:-1] = info.max  # inner windows: every product 255 * 255 in channel 1
    w = rng.choice(np.array([info.min, info.max], dt), (4, 64 // group, 3, 3))
    w[1] = info.max
    xz = np.array(info.min, dt)
    wz = np.array([info.max, info.min, 0, info.max], dt)
    n = node("ConvInteger", ["x", "w", "xz", "wz"], pads=[1, 1, 1, 1], group=group)
    got = run_own_kernel(n, [x, w, xz, wz], 10)[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, run_reference(n, [x, w, xz, wz], 10)[0])


def test_qlinear_conv_per_channel(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = rng.integers(-100, 100, (3, 2, 3, 3)).astype(np.int8)
    ws = np.array([0.01, 0.02, 0.03], np.float32)
    ins = [x, np.array(0.1, np.float32), np.array(10, np.uint8), w, ws, np.zeros(3, np.int8),
           np.array(0.2, np.float32), np.array(100, np.uint8)]  # fmt: skip
    n = node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], pads=[1, 1, 1, 1])
    check.ort(n, ins, 10, rtol=1.01, atol=1.01)  # at most one step of rounding apart


def test_conv_errors(rng: np.random.Generator, node: Any) -> None:
    with pytest.raises(InvalidArgument):
        run_own_kernel(
            node("Conv", ["x", "w"]), [randf(rng, 1, 3, 5, 5), randf(rng, 2, 2, 3, 3)], 11
        )
    with pytest.raises(InvalidArgument):  # kernel larger than the input
        run_own_kernel(
            node("Conv", ["x", "w"]), [randf(rng, 1, 2, 2, 2), randf(rng, 2, 2, 3, 3)], 11
        )
    with pytest.raises(InvalidArgument):
        run_own_kernel(
            node("ConvTranspose", ["x", "w"]), [randf(rng, 1, 3, 4, 4), randf(rng, 2, 2, 3, 3)], 11
        )


# --------------------------------------------------------------------------------------------
# Pools

POOL_CASES = [
    ((9,), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((7, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ((7, 8), {"kernel_shape": [3, 3], "strides": [2, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((7, 8), {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 0, 1, 2]}),
    ((7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((7, 8), {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((7, 8), {"kernel_shape": [3, 2], "strides": [2, 1], "auto_pad": "VALID"}),
    ((4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [1, 2, 2], "pads": [1, 0, 1, 0, 1, 1]}),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=range(len(POOL_CASES)))
def test_max_pool_random(case: Any, rng: np.random.Generator, node: Any, check: Any) -> None:
    spatial, attrs = case
    x = randf(rng, 2, 3, *spatial)
    check.ort(node("MaxPool", ["x"], 2, **attrs), [x], 12)
    if len(spatial) == 2:
        check.ort(node("MaxPool", ["x"], 2, storage_order=1, **attrs), [x], 12)


def test_max_pool_int8_and_opset8(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.integers(-128, 127, (1, 2, 6, 6)).astype(np.int8)
    check.ort(node("MaxPool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), [x], 12)
    check.ort(node("MaxPool", ["x"], 2, kernel_shape=[2, 2]), [randf(rng, 1, 2, 5, 5)], 8)


@pytest.mark.parametrize("case", POOL_CASES, ids=range(len(POOL_CASES)))
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_random(
    case: Any, include_pad: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    spatial, attrs = case
    check.ort(
        node("AveragePool", ["x"], count_include_pad=include_pad, **attrs),
        [randf(rng, 2, 3, *spatial)],
        19,
    )


@pytest.mark.parametrize("case", POOL_CASES[:4], ids=range(4))
def test_lp_pool_random(case: Any, rng: np.random.Generator, node: Any, check: Any) -> None:
    spatial, attrs = case
    attrs = {k: v for k, v in attrs.items() if k != "ceil_mode"}
    check(node("LpPool", ["x"], p=3, **attrs), [randf(rng, 2, 3, *spatial)], 18)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 5)])
def test_global_pools(
    op: str, shape: tuple[int, ...], rng: np.random.Generator, node: Any, check: Any
) -> None:
    # onnx.reference's GlobalMaxPool is wrong for 3-D input: compare with ORT throughout.
    check.ort(node(op, ["x"]), [randf(rng, *shape)], 13)


def test_max_unpool_roundtrip(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = randf(rng, 1, 2, 6, 6)
    y, idx = run_own_kernel(node("MaxPool", ["x"], 2, kernel_shape=[2, 2], strides=[2, 2]), [x])
    check.ort(node("MaxUnpool", ["y", "i"], kernel_shape=[2, 2], strides=[2, 2]), [y, idx], 11)
    with pytest.raises(InvalidArgument):
        run_own_kernel(
            node("MaxUnpool", ["y", "i"], kernel_shape=[2, 2], strides=[2, 2]), [y, idx + 100], 11
        )


def test_roi_pools(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = randf(rng, 2, 3, 10, 12)
    rois = np.array([[0, 1, 1, 6, 8], [1, 0, 2, 11, 9]], np.float32)
    check.ort(node("MaxRoiPool", ["x", "r"], pooled_shape=[3, 2], spatial_scale=1.0), [x, rois], 11)
    boxes = np.array([[0.5, 1.2, 6.1, 8.3], [0, 2, 11, 9.5], [3, 3, 4, 4]], np.float32)
    bi = np.array([0, 1, 1], np.int64)
    for mode in ("avg", "max"):
        for ctm in ("half_pixel", "output_half_pixel"):
            n = node(
                "RoiAlign", ["x", "r", "b"], mode=mode, output_height=3, output_width=4,
                sampling_ratio=2, spatial_scale=0.8, coordinate_transformation_mode=ctm,
            )  # fmt: skip
            check.ort(n, [x, boxes, bi], 16)
    with pytest.raises(InvalidArgument):
        run_own_kernel(node("RoiAlign", ["x", "r", "b"]), [x, boxes, bi + 5], 16)


def test_pool_errors(rng: np.random.Generator, node: Any) -> None:
    with pytest.raises(InvalidArgument):
        run_own_kernel(node("MaxPool", ["x"], kernel_shape=[3]), [randf(rng, 1, 2, 5, 5)], 12)
    with pytest.raises(InvalidArgument):
        run_own_kernel(
            node("AveragePool", ["x"], kernel_shape=[7, 7]), [randf(rng, 1, 2, 5, 5)], 19
        )  # short by two strides (by one, onnxruntime gives an empty axis: test_pool_short_input)
    with pytest.raises(InvalidArgument):
        run_own_kernel(node("GlobalAveragePool", ["x"]), [randf(rng, 2, 3)], 13)


# --------------------------------------------------------------------------------------------
# Normalization


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_inference(
    opset: int, shape: tuple[int, ...], rng: np.random.Generator, node: Any, check: Any
) -> None:
    # onnx.reference runs opsets 9-13 in training mode when momentum is set: compare with ORT.
    c = shape[1]
    ins = [
        randf(rng, *shape),
        randf(rng, c),
        randf(rng, c),
        randf(rng, c),
        rng.uniform(0.5, 2, c).astype(np.float32),
    ]
    check.ort(node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3), ins, opset)


def test_batch_norm_training(rng: np.random.Generator, node: Any, check: Any) -> None:
    c = 3
    ins = [
        randf(rng, 4, c, 5, 2),
        randf(rng, c),
        randf(rng, c),
        randf(rng, c),
        rng.uniform(0.5, 2, c).astype(np.float32),
    ]
    n = node("BatchNormalization", ["x", "s", "b", "m", "v"], 3, training_mode=1, momentum=0.8)
    check(n, ins, 15)


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_layer_norm(axis: int, rng: np.random.Generator, node: Any, check: Any) -> None:
    x = randf(rng, 3, 4, 5)
    scale_shape = x.shape[axis % 3 :]
    n = node("LayerNormalization", ["x", "s", "b"], 3, axis=axis, epsilon=1e-3)
    check(n, [x, randf(rng, *scale_shape), randf(rng, *scale_shape)], 17)
    got = check.ort(
        node("LayerNormalization", ["x", "s"], axis=axis), [x, randf(rng, *scale_shape)], 17
    )
    assert got[0].dtype == np.float32


def test_layer_norm_float16(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = randf(rng, 2, 8, dtype=np.float16)
    got = check.ort(
        node("LayerNormalization", ["x", "s"]),
        [x, randf(rng, 8, dtype=np.float16)],
        17,
        rtol=1e-2,
        atol=1e-2,
    )
    assert got[0].dtype == np.float16


def test_instance_group_rms_norm(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = randf(rng, 2, 6, 4, 3)
    check(node("InstanceNormalization", ["x", "s", "b"]), [x, randf(rng, 6), randf(rng, 6)], 6)
    check(
        node("GroupNormalization", ["x", "s", "b"], num_groups=3),
        [x, randf(rng, 6), randf(rng, 6)],
        21,
    )
    check(
        node("GroupNormalization", ["x", "s", "b"], num_groups=2),
        [x, randf(rng, 2), randf(rng, 2)],
        18,
    )
    check(node("RMSNormalization", ["x", "s"], axis=2), [x, randf(rng, 4, 3)], 23)
    check(node("MeanVarianceNormalization", ["x"], axes=[1, 3]), [x], 13)
    for p in (1, 2):  # onnx.reference sums x**p, not |x|**p: compare with ORT
        check.ort(node("LpNormalization", ["x"], axis=1, p=p), [x], 13)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size: int, rng: np.random.Generator, node: Any, check: Any) -> None:
    # onnx.reference's LRN loops over the batch axis instead of channels: compare with ORT
    # (which takes odd sizes only).
    check.ort(
        node("LRN", ["x"], size=size, alpha=0.02, beta=0.6, bias=1.5), [randf(rng, 2, 7, 3, 4)], 13
    )


def test_norm_errors(rng: np.random.Generator, node: Any) -> None:
    with pytest.raises(InvalidArgument):
        run_own_kernel(
            node("GroupNormalization", ["x", "s", "b"], num_groups=4),
            [randf(rng, 2, 6, 3), randf(rng, 6), randf(rng, 6)],
            21,
        )
    with pytest.raises(InvalidArgument):
        run_own_kernel(
            node("BatchNormalization", ["x", "s", "b", "m", "v"]),
            [randf(rng, 2, 3, 4)] + [randf(rng, 4)] * 4,
            15,
        )
    with pytest.raises(InvalidArgument):
        run_own_kernel(
            node("LayerNormalization", ["x", "s"]), [randf(rng, 2, 3), randf(rng, 4)], 17
        )


# --------------------------------------------------------------------------------------------
# Resize and friends

COORD_MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
               "half_pixel_symmetric"]  # fmt: skip


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", COORD_MODES)
@pytest.mark.parametrize("scales", [[1, 1, 1.7, 0.65], [1, 1, 0.5, 2.5]])
def test_resize_scales(
    mode: str, coord: str, scales: list[float], rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = randf(rng, 1, 2, 6, 7)
    n = node("Resize", ["x", "", "s"], mode=mode, coordinate_transformation_mode=coord)
    check.ort(n, [x, None, np.array(scales, np.float32)], 19)


@pytest.mark.parametrize(
    "nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
)
def test_resize_sizes_nearest_modes(
    nearest_mode: str, rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = randf(rng, 2, 3, 5, 6)
    n = node("Resize", ["x", "", "", "z"], mode="nearest", nearest_mode=nearest_mode)
    check(n, [x, None, None, np.array([2, 3, 8, 4], np.int64)], 19)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_axes_policy(
    mode: str, rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = randf(rng, 1, 2, 12, 10)
    n = node("Resize", ["x", "", "", "z"], mode=mode, antialias=1, axes=[3, 2],
             keep_aspect_ratio_policy="not_larger", exclude_outside=1)  # fmt: skip
    check(n, [x, None, None, np.array([4, 5], np.int64)], 19)


def test_resize_tf_crop_and_uint8(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.integers(0, 255, (1, 1, 6, 6)).astype(np.uint8)
    roi = np.array([0, 0, 0.2, 0.1, 1, 1, 1.2, 0.9], np.float32)
    ctm = "tf_crop_and_resize"
    n = node("Resize", ["x", "r", "", "z"], mode="linear", coordinate_transformation_mode=ctm,
             extrapolation_value=7.0)  # fmt: skip
    check.ort(n, [x, roi, None, np.array([1, 1, 5, 4], np.int64)], 19, rtol=1.01, atol=1.01)


def test_resize_align_corners_fractional_scale(
    rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = randf(rng, 1, 1, 2, 4)
    n = node(
        "Resize", ["x", "", "s"], mode="linear", coordinate_transformation_mode="align_corners"
    )
    check.ort(n, [x, None, np.array([1, 1, 0.6, 0.6], np.float32)], 19)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize10_and_upsample(mode: str, rng: np.random.Generator, node: Any, check: Any) -> None:
    x = randf(rng, 1, 2, 3, 4)
    s = np.array([1, 1, 2, 1.5], np.float32)
    check.ort(node("Resize", ["x", "s"], mode=mode), [x, s], 10)
    check.ort(node("Upsample", ["x", "s"], mode=mode), [x, s], 9)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_16(
    mode: str, padding: str, align: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = randf(rng, 2, 3, 5, 6)
    grid = rng.uniform(-1.4, 1.4, (2, 4, 3, 2)).astype(np.float32)
    n = node("GridSample", ["x", "g"], mode=mode, padding_mode=padding, align_corners=align)
    check.ort(n, [x, grid], 16)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_3d(mode: str, rng: np.random.Generator, node: Any, check: Any) -> None:
    x = randf(rng, 1, 2, 3, 4, 5)
    grid = rng.uniform(-1.2, 1.2, (1, 2, 3, 2, 3)).astype(np.float32)
    check(node("GridSample", ["x", "g"], mode=mode, padding_mode="border"), [x, grid], 20)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_and_col2im(
    align: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    theta = randf(rng, 2, 2, 3)
    check(node("AffineGrid", ["t", "s"], align_corners=align), [theta, np.array([2, 3, 4, 5])], 20)
    theta3 = randf(rng, 1, 3, 4)
    check(
        node("AffineGrid", ["t", "s"], align_corners=align), [theta3, np.array([1, 1, 2, 3, 4])], 20
    )
    x = randf(rng, 2, 3 * 4, 20)
    n = node("Col2Im", ["x", "i", "b"], strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2])
    check.ort(n, [x, np.array([8, 5]), np.array([2, 2])], 18)


def test_resize_errors(rng: np.random.Generator, node: Any) -> None:
    x = randf(rng, 1, 1, 4, 4)
    n = node("Resize", ["x", "", "s", "z"])
    with pytest.raises(InvalidArgument):
        run_own_kernel(n, [x, None, np.ones(4, np.float32), np.ones(4, np.int64)], 19)
    with pytest.raises(InvalidArgument):
        run_own_kernel(node("Resize", ["x", "", "s"]), [x, None, np.ones(3, np.float32)], 19)
    with pytest.raises(InvalidArgument):
        run_own_kernel(node("GridSample", ["x", "g"]), [x, randf(rng, 1, 2, 2, 3)], 16)
