"""Models onnxruntime saves at ORT_ENABLE_ALL, with its com.microsoft.nchwc ops, run on turnout.

onnxruntime writes the models (`optimized_model_filepath`) from conv nets built here and is the
oracle on the same saved file; outputs agree within 1e-4 of the output range. A hand-built
graph checks the block size this machine does not use (8 where AVX-512 gives 16, or the
reverse) against onnx.reference, with the filter laid out by MLAS's loops written out here.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.contrib import nchwc_layout
from turnout.graph.errors import InvalidArgument
from turnout_testbed import zoo

ort = pytest.importorskip("onnxruntime", reason="onnxruntime writes and checks these models")

F = TensorProto.FLOAT
DOMAIN = nchwc_layout.DOMAIN
Array = np.ndarray[Any, Any]


class _Net:
    """A small float conv net written node by node (seeded weights)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: Any) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def weight(self, name: str, *shape: int) -> str:
        scale = 1 / np.sqrt(np.prod(shape[1:]))
        return self.const(name, self.rng.standard_normal(shape) * scale)

    def op(self, op: str, inputs: list[str], out: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def model(self, x: list[int], y: str, y_shape: list[int]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "net", [helper.make_tensor_value_info("x", F, x)],
            [helper.make_tensor_value_info(y, F, y_shape)], self.inits,
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def _mobile(resize: dict[str, str], head_act: str, count_include_pad: int) -> onnx.ModelProto:
    """MobileNet-like: a stem on 3 channels (plain NCHW input), Clip/Relu/LeakyRelu/Sigmoid,
    depthwise and pointwise Convs, a residual Add, channel counts that are not whole blocks,
    pools, a 2x Resize, a Concat and both global pools."""
    n = _Net()
    x = n.op("Conv", ["x", n.weight("w0", 24, 3, 3, 3), n.weight("b0", 24)], "c0",
             pads=[1] * 4, strides=[2, 2])  # fmt: skip
    x = n.op("Clip", [x, n.const("lo", 0.0), n.const("hi", 6.0)], "r0")
    d = n.op("Conv", [x, n.weight("wd", 24, 1, 3, 3), n.weight("bd", 24)], "dw",
             pads=[1] * 4, group=24)  # fmt: skip
    d = n.op("Relu", [d], "dwr")
    p = n.op("Conv", [d, n.weight("wp", 24, 24, 1, 1)], "pw")
    s = n.op("Add", [p, x], "res")
    e = n.op("Conv", [s, n.weight("we", 48, 24, 1, 1), n.weight("be", 48)], "ex")
    e = n.op("LeakyRelu", [e], "exl", alpha=0.1)
    a = n.op("AveragePool", [e], "ap", kernel_shape=[3, 3], pads=[1] * 4,
             count_include_pad=count_include_pad)  # fmt: skip
    m = n.op("MaxPool", [a], "mp", kernel_shape=[2, 2], strides=[2, 2])
    u = n.op("Resize", [m, "", n.const("sc", [1, 1, 2, 2])], "up", **resize)
    c = n.op("Concat", [u, e], "cat", axis=1)
    g = n.op("Conv", [c, n.weight("wg", 32, 96, 3, 3)], "g", pads=[1] * 4)
    g = n.op(head_act, [g], "ga")
    n.op("Add", [n.op("GlobalMaxPool", [g], "gmp"), n.op("GlobalAveragePool", [g], "gap")], "y")
    return n.model([1, 3, 32, 32], "y", [1, 32, 1, 1])


def _nhwc() -> onnx.ModelProto:
    """Channels-last input and output around two Convs (Transposes next to the reorders)."""
    n = _Net(1)
    x = n.op("Transpose", ["x"], "t", perm=[0, 3, 1, 2])
    x = n.op("Conv", [x, n.weight("w0", 32, 16, 3, 3)], "c0", pads=[1] * 4)
    x = n.op("Relu", [x], "r0")
    x = n.op("Conv", [x, n.weight("w1", 16, 32, 1, 1), n.weight("b1", 16)], "c1")
    n.op("Transpose", [x], "y", perm=[0, 2, 3, 1])
    return n.model([2, 12, 12, 16], "y", [2, 12, 12, 16])


def _grouped() -> onnx.ModelProto:
    """A grouped Conv (whole blocks per group) with dilations and strides, auto_pad SAME_UPPER,
    and a ceil_mode AveragePool."""
    n = _Net(2)
    x = n.op("Conv", ["x", n.weight("w0", 64, 16, 3, 3)], "c0", pads=[1] * 4)
    x = n.op("Conv", [x, n.weight("w1", 64, 32, 3, 3)], "c1", pads=[1] * 4, group=2,
             dilations=[2, 2], strides=[2, 2])  # fmt: skip
    x = n.op("Conv", [x, n.weight("w2", 32, 64, 3, 3)], "c2", auto_pad="SAME_UPPER")
    n.op("AveragePool", [x], "y", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    return n.model([1, 16, 17, 17], "y", [1, 32, 4, 4])


MODELS = {
    "resnet18_like": lambda: zoo.resnet18_like(size=32),
    "mobile_linear_half_pixel": lambda: _mobile(
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, "Sigmoid", 0
    ),
    "mobile_linear_align_corners": lambda: _mobile(
        {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, "Tanh", 1
    ),
    "mobile_linear_asymmetric": lambda: _mobile(
        {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, "HardSigmoid", 0
    ),
    "mobile_nearest": lambda: _mobile(
        {
            "mode": "nearest",
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
        },
        "Relu",
        1,
    ),
    "nhwc": _nhwc,
    "grouped": _grouped,
}


def _optimized(name: str, tmp_path: Path) -> Path:
    """The model as onnxruntime saves it at ORT_ENABLE_ALL."""
    src, out = tmp_path / f"{name}.onnx", tmp_path / f"{name}_ort_all.onnx"
    onnx.save(MODELS[name](), src)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(out)
    so.log_severity_level = 3  # its warning that the file is hardware specific
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return out


def _nchwc_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.domain == DOMAIN]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("nchwc")
    paths = {name: _optimized(name, tmp) for name in MODELS}
    if not any(_nchwc_nodes(onnx.load(p)) for p in paths.values()):
        pytest.skip(
            "this machine's onnxruntime writes no com.microsoft.nchwc ops (its MLAS has no "
            "NCHWc kernels here)"
        )
    return paths


def _range_error(got: Array, want: Array) -> float:
    span = float(want.max() - want.min()) or 1.0
    return float(np.abs(got.astype(np.float64) - want).max()) / span


@pytest.mark.parametrize("name", sorted(MODELS))
def test_saved_model_matches_onnxruntime(name: str, saved: dict[str, Path]) -> None:
    path = saved[name]
    model = onnx.load(path)
    if not _nchwc_nodes(model):
        pytest.skip(f"onnxruntime wrote no nchwc op into {name} on this machine")
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the file as is
    want = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
        None, {model.graph.input[0].name: x}
    )
    session = turnout.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x})
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        assert _range_error(g, w) <= 1e-4


def test_saved_models_hold_every_nchwc_feature(saved: dict[str, Path]) -> None:
    """The models above exercise every nchwc op, the fused activations and the Sum input,
    so the parity test covers them (a feature onnxruntime stops writing shows up here)."""
    ops: collections.Counter[str] = collections.Counter()
    activations, sums, nhwc = set(), 0, 0
    for path in saved.values():
        for node in _nchwc_nodes(onnx.load(path)):
            ops[node.op_type] += 1
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if node.op_type == "Conv":
                activations.add(attrs.get("activation", b"").decode())
                sums += len(node.input) > 3 and bool(node.input[3])
            nhwc += bool(attrs.get("channels_last", 0))
    assert set(ops) == {
        "ReorderInput", "ReorderOutput", "Conv", "MaxPool", "AveragePool",
        "GlobalAveragePool", "GlobalMaxPool", "Upsample",
    }  # fmt: skip
    assert {"Relu", "Clip", "LeakyRelu", "Sigmoid"} <= activations
    assert sums > 0
    assert nhwc > 0


def test_schemas_infer_the_blocked_shapes(saved: dict[str, Path]) -> None:
    """Every nchwc value gets a 4-D shape of whole blocks from the schemas' inference."""
    block = nchwc_layout.block_size()
    for path in saved.values():
        model = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True)
        shapes = {
            v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in model.graph.value_info
        }
        for node in _nchwc_nodes(model):
            if node.op_type != "ReorderOutput":
                shape = shapes[node.output[0]]
                assert len(shape) == 4 and shape[1] % block == 0 and min(shape) > 0, node.name
    model = onnx.shape_inference.infer_shapes(onnx.load(saved["mobile_nearest"]))
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info
    }
    stem = next(n for n in _nchwc_nodes(model) if n.op_type == "Conv" and n.input[0] == "x")
    assert shapes[stem.output[0]] == [1, nchwc_layout.padded_channels(24, block), 16, 16]


def test_reorder_output_refuses_another_block_size(tmp_path: Path) -> None:
    block = nchwc_layout.block_size()
    node = helper.make_node(
        "ReorderOutput", ["x"], ["y"], name="to_nchw", domain=DOMAIN, channels=block + 1
    )
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", F, [1, block, 2, 2])],
        [helper.make_tensor_value_info("y", F, None)],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(DOMAIN, 1)]
    )
    session = turnout.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    with pytest.raises(InvalidArgument, match=r"to_nchw.*padded to blocks"):
        session.run(None, {"x": np.zeros((1, block, 2, 2), np.float32)})


# --- the other block size, against onnx.reference ------------------------------------------


def _mlas_filter(w: Array, block: int, blocked_input: bool) -> Array:
    """OIHW -> the saved nchwc filter, element by element in the order MLAS's reorder loops
    write it (OIHWBiBo or OIHWBo), zero-padded to whole blocks."""
    m, c, kh, kw = w.shape
    mp = nchwc_layout.padded_channels(m, block)
    cp = nchwc_layout.padded_channels(c, block) if blocked_input else c
    out: list[float] = []
    for ob in range(mp // block):
        for ib in range(cp // block if blocked_input else cp):
            for y in range(kh):
                for x in range(kw):
                    for bi in range(block if blocked_input else 1):
                        ci = ib * block + bi if blocked_input else ib
                        for bo in range(block):
                            o = ob * block + bo
                            out.append(float(w[o, ci, y, x]) if o < m and ci < c else 0.0)
    return np.array(out, np.float32).reshape(mp, cp, kh, kw)


@pytest.mark.parametrize("block", [8, 16])
def test_block_size_layouts_against_onnx_reference(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ReorderInput -> Conv (blocked input, Relu) -> depthwise Conv (+ Sum) -> MaxPool ->
    Upsample -> ReorderOutput with blocks of `block`, equal to the plain graph."""
    from turnout.graph.contrib.ops import nchwc as schemas
    from turnout.providers.cpu.kernels import contrib_nchwc as kernels

    monkeypatch.setattr(kernels, "block_size", lambda: block)
    monkeypatch.setattr(schemas, "block_size", lambda: block)
    rng = np.random.default_rng(block)
    c, m = 12, 20  # neither a whole number of blocks
    mp = nchwc_layout.padded_channels(m, block)
    w1 = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    b1 = rng.standard_normal(m).astype(np.float32)
    wd = rng.standard_normal((m, 1, 3, 3)).astype(np.float32)
    x = rng.standard_normal((2, c, 9, 9)).astype(np.float32)

    def initializers(blocked: bool) -> list[onnx.TensorProto]:
        if not blocked:
            arrays = {"w1": w1, "b1": b1, "wd": wd}
        else:
            arrays = {
                "w1": _mlas_filter(w1, block, True),
                "b1": np.pad(b1, (0, mp - m)),
                "wd": _mlas_filter(wd, block, False),
            }
        return [numpy_helper.from_array(v, k) for k, v in arrays.items()]

    conv = {"pads": [1] * 4, "kernel_shape": [3, 3]}
    plain = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], **conv),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "wd"], ["d"], group=m, **conv),
        helper.make_node("Add", ["d", "r1"], ["s"]),
        helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Resize", ["p", "", "sc"], ["y"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    ]  # fmt: skip
    nd = {"domain": DOMAIN}
    blocked = [
        helper.make_node("ReorderInput", ["x"], ["xb"], **nd),
        helper.make_node("Conv", ["xb", "w1", "b1"], ["r1"], activation="Relu", **conv, **nd),
        helper.make_node("Conv", ["r1", "wd", "", "r1"], ["s"], group=mp, **conv, **nd),
        helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2], **nd),
        helper.make_node("Upsample", ["p"], ["u"], scales=[1, 1, 2, 2], **nd),
        helper.make_node("ReorderOutput", ["u"], ["y"], channels=m, **nd),
    ]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")
    outs = []
    for nodes, is_blocked in ((plain, False), (blocked, True)):
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", F, list(x.shape))],
            [helper.make_tensor_value_info("y", F, None)],
            initializers(is_blocked) + ([] if is_blocked else [scales]),
        )  # fmt: skip
        opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(DOMAIN, 1)] * is_blocked)
        model = helper.make_model(graph, opset_imports=opsets)
        if not is_blocked:
            outs.append(onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})[0])
        else:
            session = turnout.InferenceSession(
                model.SerializeToString(), providers=["CPUExecutionProvider"]
            )
            outs.append(session.run(None, {"x": x})[0])
    want, got = outs
    assert got.shape == want.shape == (2, m, 8, 8)
    assert _range_error(got, want) <= 1e-5


def test_filter_layouts_round_trip() -> None:
    rng = np.random.default_rng(3)
    for block in (8, 16):
        for blocked_input, c in ((True, 2 * block), (False, 3)):
            w = rng.standard_normal((block, c, 3, 3)).astype(np.float32)
            saved = _mlas_filter(w, block, blocked_input)
            assert np.array_equal(nchwc_layout.unblock_filter(saved, block, blocked_input), w)
        x = rng.standard_normal((2, 3 * block, 4, 5)).astype(np.float32)
        blocked = nchwc_layout.to_blocked(x, block)
        # memory [N, C/b, H, W, b]: channel block 1, pixel (2, 3), lane 5
        assert blocked.reshape(2, 3, 4, 5, block)[1, 1, 2, 3, 5] == x[1, block + 5, 2, 3]
        assert np.array_equal(nchwc_layout.from_blocked(blocked, block), x)
