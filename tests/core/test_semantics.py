"""turnout.sdk.semantics: the op semantics every provider shares.

The functions are checked against the definitions they encode (partition of unity of the
filter taps, the rounding rule at and next to a half, SAME padding), and the providers that
build on them against each other: an Attention input that numba refuses is refused by OpenCL
with the very same error, and a Resize runs to the same values on all three providers.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import Graph
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics import (
    COORDINATE_MODES,
    attention_shapes,
    conv_geometry,
    defaults,
    extrapolation_fill,
    filter_taps,
    nearest_indices,
    resize_attr_error,
    shape,
    source_coordinates,
)
from turnout.tools.testing import cpu_session, provider_session


def _kernel_node(**attrs: Any) -> KernelNode:
    node = h.make_node("Conv", ["x", "w"], ["y"], name="conv0", **attrs)
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("x", "w")],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return KernelNode(Graph.from_proto(graph, {"": 21}).nodes[0], 21, 11)


# ------------------------------------------------------------------------------ geometry


def test_unknown_auto_pad_raises_naming_the_node() -> None:
    kn = _kernel_node(auto_pad="BOGUS")
    with pytest.raises(InvalidArgument, match=r"conv0: unknown auto_pad 'BOGUS'"):
        conv_geometry(kn, [5, 5], [3, 3], [1, 1], [1, 1])


@pytest.mark.parametrize(("auto_pad", "begin"), [("SAME_UPPER", [0, 0]), ("SAME_LOWER", [1, 1])])
def test_same_padding_keeps_ceil_of_in_over_stride(auto_pad: str, begin: list[int]) -> None:
    kn = _kernel_node(auto_pad=auto_pad)
    pb, pe, out = conv_geometry(kn, [6, 7], [2, 2], [2, 2], [1, 1])
    assert out == [3, 4]
    # total padding (out-1)*s + k - in: 0 on the first axis, 1 on the second
    assert [b + e for b, e in zip(pb, pe)] == [0, 1]
    assert pb[1] == begin[1]


# ------------------------------------------------------------------------------ resize


def test_nearest_rounding_at_and_next_to_a_half() -> None:
    src = np.array([0.5, 1.5, np.nextafter(0.5, 0.0), 2.25])
    assert nearest_indices(src, "round_prefer_floor", 2.0, 10).tolist() == [0, 1, 0, 2]
    # floor(x + 0.5) would take the value just below one half up to 1
    assert nearest_indices(src, "round_prefer_ceil", 2.0, 10).tolist() == [1, 2, 0, 2]
    assert nearest_indices(np.array([-3.0, 99.0]), "floor", 2.0, 10).tolist() == [0, 9]


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("antialias", [False, True])
def test_filter_taps_are_a_partition_of_unity(mode: str, antialias: bool) -> None:
    src = source_coordinates("half_pixel", 7, 20, 7 / 20)
    idx, w = filter_taps(src, 20, mode, 7 / 20, -0.75, antialias)
    assert idx.shape == w.shape and idx.min() >= 0 and idx.max() <= 19
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
    assert w.shape[1] == (2 if mode == "linear" else 4) or antialias


def test_linear_taps_are_the_two_neighbours() -> None:
    src = np.array([0.25, 2.75])
    idx, w = filter_taps(src, 4, "linear", 2.0)
    assert idx.tolist() == [[0, 1], [2, 3]]
    np.testing.assert_allclose(w, [[0.75, 0.25], [0.25, 0.75]])


def test_exclude_outside_moves_the_weight_inside() -> None:
    _, w = filter_taps(np.array([-0.25]), 4, "cubic", 2.0, -0.75, exclude_outside=True)
    outside = (np.floor(-0.25) + np.arange(-1, 3)) < 0
    assert (w[0][outside] == 0).all()
    np.testing.assert_allclose(w.sum(), 1.0)


def test_resize_attr_error_names_the_attribute() -> None:
    assert resize_attr_error("linear", "half_pixel", "floor") is None
    assert "coordinate_transformation_mode" in str(resize_attr_error("linear", "x", "floor"))
    assert "nearest_mode" in str(resize_attr_error("nearest", "asymmetric", "x"))
    assert "mode" in str(resize_attr_error("area", "asymmetric", "floor"))
    assert "keep_aspect_ratio_policy" in str(
        resize_attr_error("linear", "asymmetric", "floor", "x")
    )


def test_extrapolation_fill_saturates_integers() -> None:
    assert extrapolation_fill(300.0, np.dtype(np.uint8)) == 255
    assert extrapolation_fill(float("nan"), np.dtype(np.int8)) == 0
    assert extrapolation_fill(2.5, np.dtype(np.int32)) == 2  # half to even
    assert extrapolation_fill(2.5, np.dtype(np.float32)) == 2.5


# ------------------------------------------------------------------------------ attention

Q3, KV3 = (2, 5, 8), (2, 6, 4)  # 4 query heads and 2 KV heads of size 2


def test_attention_shapes_of_grouped_query_heads() -> None:
    s = attention_shapes(
        "att", 23, Q3, KV3, KV3, q_num_heads=4, kv_num_heads=2,
        attn_mask=(5, 9), past_key=(2, 2, 3, 2), past_value=(2, 2, 3, 2),
    )  # fmt: skip
    assert (s.batch, s.q_heads, s.kv_heads, s.q_len) == (2, 4, 2, 5)
    assert (s.past_len, s.kv_len, s.head_size, s.v_head_size, s.group) == (3, 9, 2, 2, 2)


BAD_ATTENTION: list[tuple[str, dict[str, Any], str]] = [
    ("ranks", {"q": (2, 5, 8), "k": (2, 2, 6, 2)}, "3-D or all 4-D"),
    ("no heads", {"q_num_heads": None}, "need q_num_heads"),
    ("hidden", {"q": (2, 5, 9)}, "not a multiple of 4 heads"),
    ("groups", {"q_num_heads": 3, "q": (2, 5, 6)}, "multiple of KV heads"),
    ("batch", {"k": (3, 6, 4), "v": (3, 6, 4)}, "do not fit"),
    ("past alone", {"past_key": (2, 2, 3, 2)}, "given together"),
    ("past shape", {"past_key": (2, 2, 3, 3), "past_value": (2, 2, 3, 2)}, "past_key"),
    ("mask keys", {"attn_mask": (5, 7)}, "does not fit 6 keys"),
    ("mask rank", {"attn_mask": ()}, "1-D to 4-D"),
    ("mask rows", {"attn_mask": (4, 6)}, "does not broadcast"),
    ("nonpad", {"nonpad_kv_seqlen": (3,)}, "nonpad_kv_seqlen"),
]


@pytest.mark.parametrize(("case", "change", "fragment"), BAD_ATTENTION, ids=lambda v: v)
def test_attention_shapes_refuse(case: str, change: dict[str, Any], fragment: str) -> None:
    args: dict[str, Any] = {"q": Q3, "k": KV3, "v": KV3, "q_num_heads": 4, "kv_num_heads": 2}
    args.update(change)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(InvalidArgument, match=fragment):
        attention_shapes("att", 23, q, k, v, **args)


# ------------------------------------------------------------------------------ providers

PROVIDERS = {
    "NumbaExecutionProvider": "turnout_numba",
    "OpenCLExecutionProvider": "turnout_opencl",
}


def _available(provider: str) -> bool:
    if importlib.util.find_spec(PROVIDERS[provider]) is None:
        return False
    if provider == "OpenCLExecutionProvider":
        from turnout_opencl.factory import OpenCLProviderFactory

        return bool(OpenCLProviderFactory().probe().ok)
    return True


def _needs(*providers: str) -> pytest.MarkDecorator:
    missing = [p for p in providers if not _available(p)]
    return pytest.mark.skipif(bool(missing), reason=f"not installed or no device: {missing}")


def _attention_model(past: bool) -> onnx.ModelProto:
    """A float32 Attention-23 node with 3-D inputs of unknown sizes: the checks run per call."""
    names = ["q", "k", "v", "mask"] + (["past_k", "past_v"] if past else [])
    node = h.make_node("Attention", names, ["y"], q_num_heads=4, kv_num_heads=2, name="att")
    graph = h.make_graph(
        [node],
        "attention",
        [h.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 23)], ir_version=10)


def _error_of(provider: str, model: onnx.ModelProto, feeds: dict[str, Any]) -> str:
    with pytest.raises(InvalidArgument) as info:
        provider_session(model, provider).run(None, feeds)
    return str(info.value)


BAD_FEEDS = [
    ("hidden", {"q": (2, 5, 9)}),
    ("batch", {"k": (3, 6, 4), "v": (3, 6, 4)}),
    ("mask keys", {"mask": (5, 7)}),
    ("mask rows", {"mask": (4, 6)}),
    ("scalar mask", {"mask": ()}),
    ("past shape", {"past_k": (2, 2, 3, 3)}),
]


@_needs(*PROVIDERS)
@pytest.mark.parametrize(("case", "change"), BAD_FEEDS, ids=lambda v: v)
def test_numba_and_opencl_refuse_attention_inputs_alike(
    case: str, change: dict[str, Any], rng: np.random.Generator
) -> None:
    shapes = {"q": Q3, "k": KV3, "v": KV3, "mask": (5, 6)}
    past = "past_k" in change
    if past:
        shapes.update(past_k=(2, 2, 3, 2), past_v=(2, 2, 3, 2), mask=(5, 9))
    shapes.update(change)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    model = _attention_model(past)
    errors = {p: _error_of(p, model, feeds) for p in PROVIDERS}
    assert len(set(errors.values())) == 1, errors
    assert "att:" in errors["NumbaExecutionProvider"]


@_needs(*PROVIDERS)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("coord", [m for m in COORDINATE_MODES if m != "tf_crop_and_resize"])
def test_resize_is_the_same_on_every_provider(
    mode: str, coord: str, rng: np.random.Generator
) -> None:
    node = h.make_node(
        "Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=coord
    )
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    scales = np.array([1, 1, 1.6, 0.7], np.float32)
    graph = h.make_graph(
        [node],
        "resize",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(scales, "scales")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 19)], ir_version=10)
    want = cpu_session(model).run(None, {"x": x})[0]
    for provider in PROVIDERS:
        got = provider_session(model, provider).run(None, {"x": x})[0]
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6, err_msg=provider)


# ------------------------------------------------------------------------------ shape (Split)


def _split_node(n_out: int, opset: int = 18, **attrs: Any) -> KernelNode:
    node = h.make_node("Split", ["x"], [f"y{i}" for i in range(n_out)], name="split0", **attrs)
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [h.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(n_out)],
    )
    since = max(v for v in (1, 2, 11, 13, 18) if v <= opset)
    return KernelNode(Graph.from_proto(graph, {"": opset}).nodes[0], opset, since)


@pytest.mark.parametrize(
    "dim,split,n_out,num_outputs,expected",
    [
        (5, [2, 3], 2, None, [2, 3]),
        (5, None, 3, 3, [2, 2, 1]),  # num_outputs: the last chunk smaller
        (6, None, 3, None, [2, 2, 2]),
        (0, None, 2, None, [0, 0]),
    ],
)
def test_split_sizes(
    dim: int, split: list[int] | None, n_out: int, num_outputs: int | None, expected: list[int]
) -> None:
    node = _split_node(n_out)
    assert shape.split_sizes(node, dim, split, n_out, num_outputs) == expected


@pytest.mark.parametrize(
    "dim,split,n_out,num_outputs",
    [
        (5, [-1, 6], 2, None),  # a negative size
        (5, [2, 2], 2, None),  # does not sum to the dim
        (5, [5], 2, None),  # one size for two outputs
        (5, None, 2, 3),  # num_outputs is not the output count
        (5, None, 2, None),  # no even split
        (1, None, 3, 3),  # more chunks than elements: a negative last chunk
    ],
)
def test_split_sizes_refuse(
    dim: int, split: list[int] | None, n_out: int, num_outputs: int | None
) -> None:
    node = _split_node(n_out)
    with pytest.raises(InvalidArgument, match=r"^split0: "):
        shape.split_sizes(node, dim, split, n_out, num_outputs)


def test_split_request_reads_attribute_or_input_per_opset() -> None:
    assert shape.split_request(_split_node(2, 11, split=[1, 2])) == [1, 2]
    assert shape.split_request(_split_node(2, 11)) is None
    assert shape.split_request(_split_node(2, 13), np.array([3, 4])) == [3, 4]
    assert shape.split_request(_split_node(2, 13)) is None


@pytest.mark.parametrize("axis,rank", [(2, 2), (-3, 2), (0, 0)])
def test_norm_axis_never_wraps(axis: int, rank: int) -> None:
    with pytest.raises(InvalidArgument, match="out of range"):
        shape.norm_axis(_split_node(1), axis, rank)
    assert shape.norm_axis(_split_node(1), -1, 3) == 2


# ------------------------------------------------------------------------------ defaults


def _selu_node(domain: str = "", **attrs: Any) -> KernelNode:
    node = h.make_node("Selu", ["x"], ["y"], name="selu0", domain=domain, **attrs)
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return KernelNode(Graph.from_proto(graph, {"": 21, "x.test": 1}).nodes[0], 21, 6)


def test_attr_fills_in_the_schema_default() -> None:
    schema = onnx.defs.get_schema("Selu").attributes["alpha"].default_value.f
    assert _selu_node().attr("alpha") == schema == 1.67326319217681884765625
    assert defaults.op_default("Selu", "alpha") == schema


def test_attr_given_value_then_caller_default_win_over_the_schema() -> None:
    assert _selu_node(alpha=2.0).attr("alpha", 3.0) == 2.0
    assert _selu_node().attr("alpha", 3.0) == 3.0
    assert _selu_node().attr("no_such_attribute") is None


def test_attr_of_another_domain_has_no_schema_defaults() -> None:
    assert _selu_node(domain="x.test").attr("alpha") is None


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (129, 300), (1000, 7), (257, 129)])
@pytest.mark.parametrize("tiled", [False, True])
def test_transposed_equals_numpys_transpose(
    shape: tuple[int, int], tiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`transposed` (tiles for big weights, one numpy call below `TILED_ABOVE`) is the
    C-contiguous transpose, edges of partial tiles and strided inputs included."""
    from turnout.sdk.semantics import constants

    if tiled:
        monkeypatch.setattr(constants, "TILED_ABOVE", 0)
    rng = np.random.default_rng(0)
    for a in (
        rng.standard_normal(shape).astype(np.float32),
        rng.standard_normal((600, 900))[::3, 1::4],
    ):
        t = constants.transposed(a)
        assert t.flags.c_contiguous and t.dtype == a.dtype and np.array_equal(t, a.T)
