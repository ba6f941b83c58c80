"""The layout hook: a provider that prefers NHWC gets Conv-like nodes as their channels-last
variants (`ai.turnout::NhwcConv`, ...) with transposes only at the ends of a chain, and the
results equal onnx.reference on the original model."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import turnout
from turnout.optimizer.layout import NHWC, NHWC_DOMAIN
from turnout.sdk.provider import CONTRACT_VERSION, ExecutionProvider, KernelNode, ProviderFactory

NAME = "NhwcTestExecutionProvider"
SEEN_SHAPES: list[tuple[Any, ...]] = []


def _conv_supports(kn: KernelNode) -> str | None:
    if kn.attr("auto_pad", "NOTSET") != "NOTSET":
        return "auto_pad is not supported"
    x = kn.inputs[0]
    return None if x is not None and x.shape is not None and len(x.shape) == 4 else "not 2-D"


def _window(xp: np.ndarray, i: int, j: int, out: tuple[int, int], st: list[int]) -> np.ndarray:
    """The [N, OH, OW, C] slice of padded NHWC `xp` that kernel tap (i, j) reads."""
    return xp[:, i : i + st[0] * (out[0] - 1) + 1 : st[0], j : j + st[1] * (out[1] - 1) + 1 : st[1]]


def _nhwc_conv(kn: KernelNode) -> Any:
    """A channels-last Conv: NHWC data, OIHW weights, explicit pads, groups and dilations."""
    SEEN_SHAPES.append(tuple(kn.inputs[0].shape))
    st = list(kn.attr("strides", [1, 1]))
    p = list(kn.attr("pads", [0, 0, 0, 0]))
    dil = list(kn.attr("dilations", [1, 1]))
    group = int(kn.attr("group", 1))

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray]:
        m, cg, kh, kw = w.shape
        xp = np.pad(x, ((0, 0), (p[0], p[2]), (p[1], p[3]), (0, 0)))
        out = (
            (xp.shape[1] - dil[0] * (kh - 1) - 1) // st[0] + 1,
            (xp.shape[2] - dil[1] * (kw - 1) - 1) // st[1] + 1,
        )
        y = np.zeros((x.shape[0], *out, m), x.dtype)
        mg = m // group
        for i in range(kh):
            for j in range(kw):
                patch = _window(xp, i * dil[0], j * dil[1], out, st)
                for g in range(group):
                    taps = w[g * mg : (g + 1) * mg, :, i, j].T
                    y[..., g * mg : (g + 1) * mg] += patch[..., g * cg : (g + 1) * cg] @ taps
        return (y + b if b is not None else y,)

    return run


def _nhwc_max_pool(kn: KernelNode) -> Any:
    """A channels-last MaxPool (2-D, explicit pads, no dilations)."""
    SEEN_SHAPES.append(tuple(kn.inputs[0].shape))
    kh, kw = kn.attr("kernel_shape")
    st = list(kn.attr("strides", [1, 1]))
    p = list(kn.attr("pads", [0, 0, 0, 0]))

    def run(x: np.ndarray) -> tuple[np.ndarray]:
        pad = ((0, 0), (p[0], p[2]), (p[1], p[3]), (0, 0))
        xp = np.pad(x, pad, constant_values=-np.inf)
        out = ((xp.shape[1] - kh) // st[0] + 1, (xp.shape[2] - kw) // st[1] + 1)
        y = np.full((x.shape[0], *out, x.shape[3]), -np.inf, x.dtype)
        for i in range(kh):
            for j in range(kw):
                np.maximum(y, _window(xp, i, j, out, st), out=y)
        return (y,)

    return run


class NhwcProvider(ExecutionProvider):
    """Runs Conv and MaxPool channels-last, and Relu (any layout)."""

    name = NAME
    preferred_layout = NHWC

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self.preferred_layout = str(options.get("layout", NHWC))
        reg = self.kernels.register
        reg("NhwcConv", since=1, domain=NHWC_DOMAIN, supports=_conv_supports)(_nhwc_conv)
        reg("NhwcMaxPool", since=1, domain=NHWC_DOMAIN, supports=_conv_supports)(_nhwc_max_pool)
        if options.get("relu", True):
            reg("Relu", since=1)(lambda kn: lambda x: (np.maximum(x, 0),))


class NhwcFactory(ProviderFactory):
    name = NAME
    contract_version = CONTRACT_VERSION
    option_names = frozenset({"layout", "relu"})

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return NhwcProvider(options)


@pytest.fixture(autouse=True)
def provider() -> Iterator[None]:
    turnout.register_provider(NhwcFactory())
    SEEN_SHAPES.clear()
    yield
    turnout.sdk.plugins.registry.unregister(NAME)


def _conv_chain() -> onnx.ModelProto:
    """Conv -> Relu -> Conv (grouped, strided) -> Conv (1x1) -> MaxPool."""
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 0, 1, 2], strides=[2, 1], group=2
        ),
        helper.make_node("Conv", ["c2", "w3", "b3"], ["c3"], name="conv3", dilations=[1, 1]),
        helper.make_node(
            "MaxPool", ["c3"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            init("w1", 4, 3, 3, 3),
            init("b1", 4),
            init("w2", 6, 2, 3, 3),
            init("w3", 5, 6, 1, 1),
            init("b3", 5),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _session(
    model: onnx.ModelProto, tmp_path: Path, providers: list[Any]
) -> tuple[turnout.InferenceSession, onnx.ModelProto]:
    opts = turnout.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = turnout.InferenceSession(model.SerializeToString(), opts, providers=providers)
    return sess, onnx.load(str(tmp_path / "optimized.onnx"))


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_a_conv_chain_runs_channels_last_between_two_transposes(tmp_path: Path) -> None:
    model = _conv_chain()
    sess, optimized = _session(model, tmp_path, [NAME, "CPUExecutionProvider"])
    assert _ops(optimized).count("Transpose") == 2
    assert _ops(optimized).count("NhwcConv") == 3 and "Conv" not in _ops(optimized)
    assert [n.domain for n in optimized.graph.node if n.op_type.startswith("Nhwc")] == [
        NHWC_DOMAIN
    ] * 4
    # the kernels were handed NHWC data: [N, H, W, C]
    assert SEEN_SHAPES == [(1, 8, 9, 3), (1, 8, 9, 4), (1, 4, 9, 6), (1, 4, 9, 5)]
    ran = {a.op_type: a.provider for a in sess.partition_report().assignments}
    assert ran["NhwcConv"] == ran["NhwcMaxPool"] == ran["Relu"] == NAME
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 9)).astype(np.float32)
    (got,) = sess.run(None, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.shape == want.shape == (1, 5, 2, 4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_conv_relu_is_not_fused_into_a_cpu_fusedconv(tmp_path: Path) -> None:
    # the provider has no Relu: Conv + Relu would become ai.turnout::FusedConv, which only the
    # CPU provider runs; running Conv as NhwcConv makes this provider the Conv's owner instead
    model = _conv_chain()
    sess, optimized = _session(model, tmp_path, [(NAME, {"relu": False}), "CPUExecutionProvider"])
    assert _ops(optimized).count("NhwcConv") == 3 and "FusedConv" not in _ops(optimized)
    assert _ops(optimized).count("Transpose") == 2  # pushed through the CPU's Relu
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 9)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_a_provider_that_prefers_nchw_gets_the_graph_as_it_was(tmp_path: Path) -> None:
    _, optimized = _session(
        _conv_chain(), tmp_path, [(NAME, {"layout": "NCHW"}), "CPUExecutionProvider"]
    )
    assert "Transpose" not in _ops(optimized) and _ops(optimized).count("Conv") == 3
    assert SEEN_SHAPES == []


def test_without_a_provider_that_prefers_nhwc_nothing_moves(tmp_path: Path) -> None:
    _, optimized = _session(_conv_chain(), tmp_path, ["CPUExecutionProvider"])
    assert not any(op == "Transpose" or op.startswith("Nhwc") for op in _ops(optimized))


def test_the_layout_follows_the_optimization_level(tmp_path: Path) -> None:
    opts = turnout.SessionOptions()
    opts.graph_optimization_level = turnout.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    model = _conv_chain()
    sess = turnout.InferenceSession(
        model.SerializeToString(), opts, providers=[NAME, "CPUExecutionProvider"]
    )
    assert "NhwcConv" not in _ops(onnx.load(str(tmp_path / "optimized.onnx")))
    x = np.ones((1, 3, 8, 9), np.float32)
    np.testing.assert_allclose(
        sess.run(None, {"x": x})[0], ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-4
    )


def test_two_convs_reading_one_value_share_its_transpose(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    w = [rng.standard_normal((2, 3, 1, 1)).astype(np.float32) for _ in range(2)]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a"),
            helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
            helper.make_node("Add", ["a", "b"], ["y"], name="add"),
        ],
        "fork",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w[0], "wa"), numpy_helper.from_array(w[1], "wb")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess, optimized = _session(model, tmp_path, [NAME, "CPUExecutionProvider"])
    to_nhwc = [n for n in optimized.graph.node if n.op_type == "Transpose" and n.input[0] == "x"]
    assert len(to_nhwc) == 1 and _ops(optimized).count("Transpose") == 3  # two back, before Add
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_a_conv_chain_in_an_if_branch_runs_channels_last(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)

    def branch(name: str, act: str) -> onnx.GraphProto:
        return helper.make_graph(
            [
                helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
                helper.make_node(act, ["c"], ["r"]),
                helper.make_node("Conv", ["r", "w2"], ["o"]),
            ],
            name,
            [],
            [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
        )

    graph = helper.make_graph(
        [
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                then_branch=branch("t", "Relu"),
                else_branch=branch("e", "Tanh"),
            )
        ],
        "branches",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1"),
            numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess, optimized = _session(model, tmp_path, [NAME, "CPUExecutionProvider"])
    for body in optimized.graph.node[0].attribute:
        ops = _ops(onnx.ModelProto(graph=body.g))
        assert ops.count("NhwcConv") == 2 and ops.count("Transpose") == 2, (body.name, ops)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    for cond in (True, False):
        feeds = {"cond": np.array(cond), "x": x}
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        np.testing.assert_allclose(sess.run(None, feeds)[0], want, rtol=1e-4, atol=1e-5)
