"""turnout's own shape/data-movement kernels against the ONNX node tests and onnx.reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import check_official_case, iter_node_cases, run_own_kernel

OPS = {
    "Reshape", "Transpose", "Concat", "Split", "Slice", "Squeeze", "Unsqueeze", "Flatten",
    "Shape", "Size", "Expand", "Tile", "Pad", "ConstantOfShape", "Constant", "Identity", "Range",
    "NonZero", "OneHot", "Trilu", "DepthToSpace", "SpaceToDepth", "Compress", "Unique",
    "ReverseSequence", "EyeLike", "CenterCropPad", "Optional", "OptionalHasElement",
    "OptionalGetElement",
}  # fmt: skip
CASES = list(iter_node_cases(OPS))

# data movement is exact but for Range's float steps: held to 1e-6
pytestmark = pytest.mark.kernel_check(rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_node_case(case: Any) -> None:
    check_official_case(case)


def i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


# --------------------------------------------------------------------------------------------
# Views, not copies


def test_metadata_ops_return_views(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((2, 3, 1, 4)).astype(np.float32)
    x.setflags(write=False)
    cases = [
        (node("Reshape", ["x", "s"]), [x, i64(0, -1)], 21),
        (node("Transpose", ["x"], perm=[3, 1, 0, 2]), [x], 21),
        (node("Squeeze", ["x", "a"]), [x, i64(2)], 21),
        (node("Unsqueeze", ["x", "a"]), [x, i64(0, -1)], 21),
        (node("Flatten", ["x"], axis=2), [x], 21),
        (node("Identity", ["x"]), [x], 21),
        (node("Slice", ["x", "s", "e"]), [x, i64(1), i64(3)], 21),
    ]
    for n, inputs, opset in cases:
        (y,) = check(n, inputs, opset)
        assert np.shares_memory(y, x), n.op_type


# --------------------------------------------------------------------------------------------
# Reshape / Squeeze / Unsqueeze / Flatten / Transpose


@pytest.mark.parametrize(
    "in_shape,shape,allowzero",
    [
        ((2, 3, 4), (4, 0, -1), 0),
        ((2, 0, 4), (0, -1, 0), 0),
        ((2, 0, 4), (0, 8), 1),
        ((2, 3, 4), (-1,), 0),
        ((6,), (1, 2, 1, 3), 0),
        ((1,), (), 0),
    ],
)
def test_reshape(
    in_shape: tuple[int, ...],
    shape: tuple[int, ...],
    allowzero: int,
    rng: np.random.Generator,
    node: Any,
    check: Any,
) -> None:
    x = rng.standard_normal(in_shape).astype(np.float32)
    check(node("Reshape", ["x", "s"], allowzero=allowzero), [x, np.array(shape, np.int64)])


def test_reshape_opset1_attr(rng: np.random.Generator, node: Any) -> None:
    x = rng.standard_normal((2, 2, 3)).astype(np.float64)
    (y,) = run_own_kernel(node("Reshape", ["x"], shape=[3, 0, -1]), [x], 1)
    np.testing.assert_array_equal(y, x.reshape(3, 2, 2))


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_versions(
    opset: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = rng.integers(0, 9, (1, 3, 1, 2)).astype(np.int32)
    if opset < 13:
        check(node("Squeeze", ["x"], axes=[-2, 0]), [x], opset)
        check(node("Squeeze", ["x"]), [x], opset)
        check(node("Unsqueeze", ["x"], axes=[-1, 1, 0]), [x], opset)
    else:
        check(node("Squeeze", ["x", "a"]), [x, i64(-2, 0)], opset)
        check(node("Squeeze", ["x"]), [x], opset)
        check(node("Unsqueeze", ["x", "a"]), [x, i64(-1, 1, 0)], opset)


@pytest.mark.parametrize("axis", [-4, -1, 0, 2, 4])
def test_flatten_axes(axis: int, rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    check(node("Flatten", ["x"], axis=axis), [x])
    # onnx.reference cannot reshape an empty tensor with -1
    check.ort(node("Flatten", ["x"], axis=axis), [x[:, :0]])


def test_transpose_random_perms(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float16)
    for _ in range(5):
        check(node("Transpose", ["x"], perm=rng.permutation(4).tolist()), [x])
    check(node("Transpose", ["x"]), [x])


# --------------------------------------------------------------------------------------------
# Concat / Split / Slice


def test_concat_negative_axis_and_strings(rng: np.random.Generator, node: Any, check: Any) -> None:
    a = np.array([["a", "b"]], dtype=object)
    b = np.array([["c", "d"], ["e", "f"]], dtype=object)
    check(node("Concat", ["a", "b"], axis=-2), [a, b])
    x = rng.standard_normal((2, 0, 3)).astype(np.float32)
    y = rng.standard_normal((2, 4, 3)).astype(np.float32)
    check(node("Concat", ["x", "y"], axis=1), [x, y])


@pytest.mark.parametrize(
    "opset,dim,n_out,attrs,split",
    [
        (11, 6, 3, {}, None),
        (11, 6, 2, {"split": [1, 5]}, None),
        (13, 7, 3, {}, i64(2, 2, 3)),
        (13, 6, 2, {}, None),
        (18, 7, 3, {"num_outputs": 3}, None),
        (18, 10, 4, {"num_outputs": 4}, None),
        (18, 7, 2, {}, i64(0, 7)),
    ],
)
def test_split(
    opset: int,
    dim: int,
    n_out: int,
    attrs: dict[str, Any],
    split: Any,
    rng: np.random.Generator,
    node: Any,
    check: Any,
) -> None:
    x = rng.standard_normal((2, dim)).astype(np.float32)
    ins = ["x"] if split is None else ["x", "s"]
    feeds = [x] if split is None else [x, split]
    check(node("Split", ins, n_out, axis=-1, **attrs), feeds, opset)


def test_slice_random_against_onnxruntime(rng: np.random.Generator, node: Any, check: Any) -> None:
    """onnx.reference clamps negative-step starts the numpy way, not the spec's; ORT is right."""
    x = rng.standard_normal((5, 6, 7)).astype(np.float32)
    big = np.iinfo(np.int64).max
    for _ in range(40):
        axes = rng.permutation(3)[: rng.integers(1, 4)]
        starts = rng.choice([-9, -3, -1, 0, 2, 4, 9, big, -big], len(axes))
        ends = rng.choice([-9, -3, -1, 0, 2, 5, 9, big, -big], len(axes))
        steps = rng.choice([-3, -2, -1, 1, 2, 3], len(axes))
        # ORT reads end=INT64_MAX with a negative step as "to the start"; the spec (and
        # onnx.reference) clamp it to dim-1, giving an empty slice. We follow the spec.
        ends[(steps < 0) & (ends == big)] = -big
        feeds = [x, starts.astype(np.int64), ends.astype(np.int64)]
        feeds += [axes.astype(np.int64) - 3 * rng.integers(0, 2), steps.astype(np.int64)]
        check.ort(node("Slice", ["x", "s", "e", "a", "t"]), feeds)
    check(node("Slice", ["x", "s", "e"]), [x, i64(1, -2), i64(big, -1)])
    check(node("Slice", ["x", "s", "e", "a", "t"]), [x, i64(-1), i64(-big), i64(1), i64(-2)])
    check(node("Slice", ["x", "s", "e", "a", "t"]), [x, i64(0), i64(big), i64(1), i64(-2)])


def test_slice_opset1_attrs(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((4, 5)).astype(np.float32)
    check(node("Slice", ["x"], starts=[1, -3], ends=[100, -1], axes=[0, 1]), [x], 9)
    check(node("Slice", ["x"], starts=[1], ends=[3]), [x], 9)


# --------------------------------------------------------------------------------------------
# Expand / Tile / Pad / CenterCropPad


@pytest.mark.parametrize(
    "in_shape,shape", [((3, 1), (2, 1, 6)), ((1,), ()), ((2, 3), (1, 1)), ((4, 1), (4, 0))]
)
def test_expand(
    in_shape: tuple[int, ...],
    shape: tuple[int, ...],
    rng: np.random.Generator,
    node: Any,
    check: Any,
) -> None:
    x = rng.standard_normal(in_shape).astype(np.float32)
    (y,) = check(node("Expand", ["x", "s"]), [x, np.array(shape, np.int64)])
    assert y.flags.writeable


def test_tile(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.integers(0, 5, (2, 3)).astype(np.int8)
    check(node("Tile", ["x", "r"]), [x, i64(3, 0)])
    check(node("Tile", ["x", "r"]), [x, i64(2, 2)])


PAD_MODES = [(m, o) for o in (11, 18, 19) for m in ("constant", "reflect", "edge", "wrap")]


@pytest.mark.parametrize("mode,opset", [(m, o) for m, o in PAD_MODES if m != "wrap" or o >= 19])
def test_pad_modes(mode: str, opset: int, rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    pads = i64(1, 0, 2, 2, 3, 0)
    if opset >= 18:
        n = node("Pad", ["x", "p", "v", "a"], mode=mode)
        check(n, [x, i64(2, 1, 0, 3), np.array(1.5, np.float32), i64(-1, 0)], opset)
    check(node("Pad", ["x", "p", "v"], mode=mode), [x, pads, np.array(-2, np.float32)], opset)
    check(node("Pad", ["x", "p"], mode=mode), [x, pads], opset)


def test_pad_attr_form_and_ints(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.integers(-5, 5, (2, 3)).astype(np.int32)
    check(node("Pad", ["x"], pads=[0, 1, 2, 1], value=7.0), [x], 10)
    check(node("Pad", ["x"], pads=[1, 1, 1, 1], mode="edge"), [x], 10)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_negative_pads_match_onnxruntime(
    mode: str, rng: np.random.Generator, node: Any, check: Any
) -> None:
    """onnx.reference rejects negative pads; onnxruntime crops, and so do we."""
    x = rng.standard_normal((4, 6)).astype(np.float32)
    check.ort(node("Pad", ["x", "p"], mode=mode), [x, i64(-1, 2, 2, -3)], 13)


def test_center_crop_pad(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((5, 4, 3)).astype(np.float32)
    check(node("CenterCropPad", ["x", "s"]), [x, i64(2, 7, 3)], 18)
    check(node("CenterCropPad", ["x", "s"], axes=[-1, 0]), [x, i64(6, 2)], 18)


# --------------------------------------------------------------------------------------------
# Constants, Shape, Range, index ops


def test_constant_variants(node: Any, check: Any) -> None:
    checks = [
        {"value_float": 2.5},
        {"value_floats": [1.0, -2.0]},
        {"value_int": 7},
        {"value_ints": [1, 2, 3]},
        {"value_string": "héllo"},
        {"value_strings": ["a", "bc"]},
        {"value": numpy_helper.from_array(np.arange(6, dtype=np.uint16).reshape(2, 3))},
    ]
    for attrs in checks:
        check(node("Constant", [], **attrs), [])
    sp = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5.0, 6.0], np.float32), "v"),
        numpy_helper.from_array(np.array([1, 7], np.int64), "i"),
        [3, 4],
    )
    (y,) = run_own_kernel(node("Constant", [], sparse_value=sp), [])
    dense = np.zeros(12, np.float32)
    dense[[1, 7]] = [5.0, 6.0]
    np.testing.assert_array_equal(y, dense.reshape(3, 4))
    assert y.dtype == np.float32


def test_constant_of_shape(node: Any, check: Any) -> None:
    v = numpy_helper.from_array(np.array([3], np.int32))
    check(node("ConstantOfShape", ["s"], value=v), [i64(2, 0, 3)])
    check(node("ConstantOfShape", ["s"]), [np.zeros(0, np.int64)])


@pytest.mark.parametrize("start,end", [(0, None), (-2, None), (1, -1), (-10, 10), (3, 1)])
def test_shape_start_end(start: int, end: int | None, node: Any, check: Any) -> None:
    x = np.zeros((2, 3, 4, 5), np.float32)
    attrs = {"start": start} | ({} if end is None else {"end": end})
    check(node("Shape", ["x"], **attrs), [x], 15)
    check(node("Size", ["x"]), [x])


@pytest.mark.parametrize(
    "start,limit,delta,dtype",
    [(3, 9, 3, np.int32), (10, 4, -2, np.int64), (0.5, 3.2, 0.3, np.float32),
     (1.0, -2.0, -0.25, np.float64), (5, 5, 1, np.int16), (1, 0, 1, np.float32)],
)  # fmt: skip
def test_range(start: float, limit: float, delta: float, dtype: Any, node: Any, check: Any) -> None:
    scalars = [np.array(v, dtype) for v in (start, limit, delta)]
    check(node("Range", ["a", "b", "c"]), scalars)


def test_nonzero_and_compress(rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.integers(0, 3, (3, 4)).astype(np.float32)
    check(node("NonZero", ["x"]), [x])
    check(node("NonZero", ["x"]), [np.zeros((2, 0), np.int32)])
    cond = np.array([True, False, True])
    check(node("Compress", ["x", "c"], axis=-2), [x, cond])
    check(node("Compress", ["x", "c"]), [x, cond])
    check(node("Compress", ["x", "c"], axis=1), [x, np.array([False, True])])


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
def test_one_hot(axis: int, rng: np.random.Generator, node: Any, check: Any) -> None:
    indices = rng.integers(-7, 7, (3, 4)).astype(np.int64)
    values = np.array([-1, 5], np.float32)
    check(node("OneHot", ["i", "d", "v"], axis=axis), [indices, np.array(5, np.int64), values])
    # onnx.reference rejects a 1-element (not 0-d) depth, which the spec allows
    check.ort(node("OneHot", ["i", "d", "v"], axis=axis), [indices.astype(np.float32),
              np.array([4.0], np.float32), values])  # fmt: skip


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu(upper: int, rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    for k in (-6, -1, 0, 2, 9):
        check(node("Trilu", ["x", "k"], upper=upper), [x, np.array(k, np.int64)])
    check(node("Trilu", ["x"], upper=upper), [x])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space_round_trip(mode: str, rng: np.random.Generator, node: Any, check: Any) -> None:
    x = rng.standard_normal((2, 12, 3, 2)).astype(np.float32)
    (y,) = check(node("DepthToSpace", ["x"], blocksize=2, mode=mode), [x])
    check(node("SpaceToDepth", ["x"], blocksize=2), [y])
    (back,) = run_own_kernel(node("SpaceToDepth", ["x"], blocksize=2, mode=mode), [y], 28)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique(
    sorted_: int, axis: int | None, rng: np.random.Generator, node: Any, check: Any
) -> None:
    """Against onnxruntime: onnx.reference's unsorted Unique with an axis is wrong."""
    x = rng.integers(0, 3, (4, 3)).astype(np.float32)
    x[2] = x[0]
    x[:, 2] = x[:, 0]
    attrs = {"sorted": sorted_} | ({} if axis is None else {"axis": axis})
    check.ort(node("Unique", ["x"], 4, **attrs), [x])
    if sorted_:  # the reference's unsorted path breaks on numpy 2
        check(node("Unique", ["x"], 4, **attrs), [x])


def test_unique_strings(node: Any, check: Any) -> None:
    x = np.array(["b", "a", "b", "c", "a"], dtype=object)
    check(node("Unique", ["x"], 4, sorted=0), [x])
    check(node("Unique", ["x"], 4), [x])


@pytest.mark.parametrize("batch_axis,time_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(
    batch_axis: int, time_axis: int, rng: np.random.Generator, node: Any, check: Any
) -> None:
    x = rng.standard_normal((4, 4, 3)).astype(np.float32)
    lens = i64(1, 4, 0, 3)
    n = node("ReverseSequence", ["x", "l"], batch_axis=batch_axis, time_axis=time_axis)
    check(n, [x, lens])


@pytest.mark.parametrize("k", [-2, 0, 1, 5])
def test_eye_like(k: int, node: Any, check: Any) -> None:
    x = np.zeros((3, 4), np.int32)
    check(node("EyeLike", ["x"], k=k), [x])
    check(node("EyeLike", ["x"], k=k, dtype=TensorProto.DOUBLE), [x])


def test_optional_ops_with_none(node: Any) -> None:
    has = run_own_kernel(node("OptionalHasElement", ["o"]), [None], 18)
    assert has[0].dtype == np.bool_ and not has[0]
    x = np.ones(2, np.float32)
    assert run_own_kernel(node("OptionalHasElement", ["o"]), [x], 18)[0]
    with pytest.raises(InvalidArgument, match="my_OptionalGetElement"):
        run_own_kernel(node("OptionalGetElement", ["o"]), [None], 18)
    assert run_own_kernel(node("Identity", ["o"]), [[x, x]], 21)[0] == [x, x]


# --------------------------------------------------------------------------------------------
# Bad inputs


BAD_INPUTS = [  # (op, input names, node() keywords, inputs)
    ("Reshape", ["x", "s"], {}, [np.zeros((2, 3)), i64(4, -1)]),
    ("Reshape", ["x", "s"], {}, [np.zeros((2, 3)), i64(-1, -1)]),
    ("Reshape", ["x", "s"], {"allowzero": 1}, [np.zeros((2, 3)), i64(0, -1)]),
    ("Squeeze", ["x", "a"], {}, [np.zeros((2, 3)), i64(1)]),
    ("Unsqueeze", ["x", "a"], {}, [np.zeros((2, 3)), i64(5)]),
    ("Concat", ["x", "y"], {"axis": 0}, [np.zeros((2, 3)), np.zeros((2, 4))]),
    ("Concat", ["x", "y"], {"axis": 2}, [np.zeros((2, 3)), np.zeros((2, 3))]),
    ("Split", ["x", "s"], {"n_out": 2}, [np.zeros(5), i64(2, 2)]),
    ("Split", ["x"], {"n_out": 2}, [np.zeros(5)]),
    ("Slice", ["x", "s", "e", "a", "t"], {}, [np.zeros(5), i64(0), i64(3), i64(0), i64(0)]),
    ("Slice", ["x", "s", "e", "a"], {}, [np.zeros(5), i64(0), i64(3), i64(1)]),
    ("Expand", ["x", "s"], {}, [np.zeros((2, 3)), i64(4, 3)]),
    ("Tile", ["x", "r"], {}, [np.zeros((2, 3)), i64(2)]),
    ("Pad", ["x", "p"], {}, [np.zeros((2, 3)), i64(1, 1)]),
    ("Pad", ["x", "p"], {}, [np.zeros((2, 3)), i64(-2, 0, -1, 0)]),
    ("Transpose", ["x"], {"perm": [0, 0]}, [np.zeros((2, 3))]),
    ("DepthToSpace", ["x"], {"blocksize": 2}, [np.zeros((1, 3, 2, 2))]),
    ("ReverseSequence", ["x", "l"], {}, [np.zeros((2, 2)), i64(3, 1)]),
    ("Range", ["a", "b", "c"], {}, [i64(0)[0], i64(5)[0], i64(0)[0]]),
    ("ConstantOfShape", ["s"], {}, [i64(2, -1)]),
]


@pytest.mark.parametrize("op,names,kw,inputs", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs_raise_invalid_argument(
    op: str, names: list[str], kw: dict[str, Any], inputs: list[Any], node: Any, check: Any
) -> None:
    check.rejects(node(op, names, **kw), inputs, 21)
