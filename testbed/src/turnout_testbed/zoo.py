"""Model builders for tests and benchmarks: seeded random weights, checked by onnx.checker.

- `mlp`: 784-1024-1024-10 with Relu (MatMul+Add, so the optimizer has Gemm fusions to do).
- `bert_like`: a BERT encoder written out the way exporters write it: Erf-GELU, LayerNorm as
  ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add, attention as MatMul-Scale-Add(mask)-Softmax-MatMul with
  the head Reshape/Transposes, symbolic batch and sequence dims when `dynamic`.
- `resnet18_like`: Conv+BatchNormalization+Relu blocks, residual Adds, GlobalAveragePool, Gemm.
- `tiny_ops_chain`: n small element-wise ops in a row (per-node overhead).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["bert_like", "mlp", "resnet18_like", "small_classifier", "tiny_ops_chain"]

F = TensorProto.FLOAT


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape: int, scale: float | None = None, hint: str = "w") -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        return self.const((self.rng.standard_normal(shape) * s).astype(np.float32), hint)

    def op(self, op: str, inputs: list[str], hint: str | None = None, **attrs: Any) -> str:
        out = self.name(hint or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(op), **attrs))
        return out

    def model(
        self,
        name: str,
        inputs: list[onnx.ValueInfoProto],
        outputs: list[onnx.ValueInfoProto],
        opset: int,
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        model.producer_name = "turnout_testbed.zoo"
        onnx.checker.check_model(model)
        return model


def mlp(batch: int = 64, seed: int = 0) -> onnx.ModelProto:
    """784-1024-1024-10 multilayer perceptron (MatMul + Add + Relu)."""
    b = _Builder(seed)
    x = "x"
    sizes = [784, 1024, 1024, 10]
    for i, (k, n) in enumerate(itertools.pairwise(sizes)):
        x = b.op("Add", [b.op("MatMul", [x, b.weight(k, n)]), b.weight(n, scale=0.1)])
        if i < len(sizes) - 2:
            x = b.op("Relu", [x])
    b.nodes[-1].output[0] = "logits"
    return b.model(
        "mlp",
        [helper.make_tensor_value_info("x", F, [batch, 784])],
        [helper.make_tensor_value_info("logits", F, [batch, 10])],
        13,
    )


def small_classifier(width: int = 32, seed: int = 0) -> onnx.ModelProto:
    """MatMul -> Add -> Relu -> MatMul -> Softmax over a symbolic batch: small and fast, with
    kernels of several families and a group that providers fuse (thread-safety checks)."""
    b = _Builder(seed)
    h = b.op(
        "Relu", [b.op("Add", [b.op("MatMul", ["x", b.weight(width, width)]), b.weight(width)])]
    )
    b.nodes.append(
        helper.make_node("Softmax", [b.op("MatMul", [h, b.weight(width, width)])], ["y"], axis=-1)
    )
    return b.model(
        "small_classifier",
        [helper.make_tensor_value_info("x", F, ["n", width])],
        [helper.make_tensor_value_info("y", F, ["n", width])],
        18,
    )


def _layer_norm(b: _Builder, x: str, hidden: int, opset: int) -> str:
    def mean_of(v: str) -> str:
        if opset >= 18:  # axes became an input
            return b.op("ReduceMean", [v, b.const(np.array([-1], np.int64))])
        return b.op("ReduceMean", [v], axes=[-1])

    mean = mean_of(x)
    d = b.op("Sub", [x, mean])
    var = mean_of(b.op("Pow", [d, b.const(np.float32(2.0))]))
    std = b.op("Sqrt", [b.op("Add", [var, b.const(np.float32(1e-12))])])
    n = b.op("Div", [d, std])
    gamma = b.const((1 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32), "gamma")
    return b.op("Add", [b.op("Mul", [n, gamma]), b.weight(hidden, scale=0.1, hint="beta")])


def _dense(b: _Builder, x: str, k: int, n: int) -> str:
    return b.op("Add", [b.op("MatMul", [x, b.weight(k, n)]), b.weight(n, scale=0.02, hint="b")])


def _gelu(b: _Builder, x: str) -> str:
    e = b.op("Erf", [b.op("Div", [x, b.const(np.float32(np.sqrt(2.0)))])])
    p = b.op("Add", [e, b.const(np.float32(1.0))])
    return b.op("Mul", [b.op("Mul", [x, p]), b.const(np.float32(0.5))])


def bert_like(
    layers: int = 4,
    hidden: int = 768,
    heads: int = 12,
    seq: int = 128,
    batch: int = 1,
    dynamic: bool = True,
    seed: int = 0,
    opset: int = 14,
) -> onnx.ModelProto:
    """A BERT-style encoder over embeddings `x` [B, S, hidden] and an attention mask [B, S]."""
    b = _Builder(seed)
    dim = hidden // heads
    bdim: int | str = "batch" if dynamic else batch
    sdim: int | str = "sequence" if dynamic else seq
    # additive mask: (1 - mask) * -10000, as [B, 1, 1, S]
    m = b.op("Cast", ["attention_mask"], to=F)
    m = b.op("Sub", [b.const(np.float32(1.0)), m])
    m = b.op("Mul", [m, b.const(np.float32(-10000.0))])
    mask = b.op("Unsqueeze", [m, b.const(np.array([1, 2], np.int64))])
    split = b.const(np.array([0, 0, heads, dim], np.int64), "split_shape")
    merge = b.const(np.array([0, 0, hidden], np.int64), "merge_shape")
    x = _layer_norm(b, "x", hidden, opset)
    for _ in range(layers):
        q, k, v = (_dense(b, x, hidden, hidden) for _ in range(3))
        qh = b.op("Transpose", [b.op("Reshape", [q, split])], perm=[0, 2, 1, 3])
        kh = b.op("Transpose", [b.op("Reshape", [k, split])], perm=[0, 2, 3, 1])
        vh = b.op("Transpose", [b.op("Reshape", [v, split])], perm=[0, 2, 1, 3])
        s = b.op("MatMul", [qh, kh])
        s = b.op("Div", [s, b.const(np.float32(np.sqrt(dim)))])
        s = b.op("Add", [s, mask])
        p = b.op("Softmax", [s], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [p, vh])], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, merge])
        attn = _dense(b, ctx, hidden, hidden)
        x = _layer_norm(b, b.op("Add", [attn, x]), hidden, opset)
        h = _gelu(b, _dense(b, x, hidden, 4 * hidden))
        x = _layer_norm(b, b.op("Add", [_dense(b, h, 4 * hidden, hidden), x]), hidden, opset)
    b.nodes[-1].output[0] = "last_hidden_state"
    return b.model(
        "bert_like",
        [
            helper.make_tensor_value_info("x", F, [bdim, sdim, hidden]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [bdim, sdim]),
        ],
        [helper.make_tensor_value_info("last_hidden_state", F, [bdim, sdim, hidden])],
        opset,
    )


def resnet18_like(batch: int = 1, size: int = 224, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 layout: Conv+BN+Relu stem, 4 stages of 2 basic blocks, GAP, Gemm."""
    b = _Builder(seed)

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
        pad = k // 2
        y = b.op(
            "Conv", [x, b.weight(cout, cin, k, k)], kernel_shape=[k, k],
            strides=[stride, stride], pads=[pad] * 4,
        )  # fmt: skip
        bn = [
            b.const((1 + 0.1 * b.rng.standard_normal(cout)).astype(np.float32), "scale"),
            b.weight(cout, scale=0.1, hint="bias"),
            b.weight(cout, scale=0.1, hint="mean"),
            b.const((0.5 + b.rng.random(cout)).astype(np.float32), "var"),
        ]
        y = b.op("BatchNormalization", [y, *bn], epsilon=1e-5)
        return b.op("Relu", [y]) if relu else y

    x = conv_bn("image", 3, 64, 7, 2, True)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            y = conv_bn(x, cin, cout, 3, s, True)
            y = conv_bn(y, cout, cout, 3, 1, False)
            short = x if (s == 1 and cin == cout) else conv_bn(x, cin, cout, 1, s, False)
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.op("Gemm", [x, b.weight(1000, 512), b.weight(1000, scale=0.1)], transB=1)
    b.nodes[-1].output[0] = "logits"
    return b.model(
        "resnet18_like",
        [helper.make_tensor_value_info("image", F, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", F, [batch, 1000])],
        13,
    )


def tiny_ops_chain(n: int = 200, seed: int = 0) -> onnx.ModelProto:
    """n small element-wise ops in a chain over a [1, 16] input (measures per-node overhead)."""
    b = _Builder(seed)
    x = "x"
    for i in range(n):
        op = ("Add", "Mul", "Relu", "Sub")[i % 4]
        x = b.op(op, [x] if op == "Relu" else [x, b.weight(16, scale=0.1)])
    b.nodes[-1].output[0] = "y"
    return b.model(
        "tiny_ops_chain",
        [helper.make_tensor_value_info("x", F, [1, 16])],
        [helper.make_tensor_value_info("y", F, [1, 16])],
        13,
    )
