"""Representative graphs for the compile-only check: what a real model asks the code generator
for (an MLP's bias + GELU, a residual block, a broadcast chain, Where/Clip, residual +
LayerNorm, LogSoftmax, the BERT-like encoder from `turnout_testbed.zoo`), plus every op of
`codegen.FUSED_OPS` alone in float32 and float64, each with one dense and one broadcast input
so both load paths appear."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .codegen import FUSED_OPS

__all__ = ["Case", "cases"]

Case = tuple[str, onnx.ModelProto, dict[str, np.ndarray]]
_F32, _F64 = TensorProto.FLOAT, TensorProto.DOUBLE
_ARITY = {"Where": 3, "Clip": 3, "Max": 3, "Min": 3, "Sum": 3}
_BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "PRelu"}
_OPSET = 21


Inputs = dict[str, tuple[int, list[int | str]]]


def _model(nodes: list[onnx.NodeProto], inputs: Inputs, outs: list[str]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "representative",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])


def _feeds(inputs: Inputs, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for name, (t, shape) in inputs.items():
        dims = [d if isinstance(d, int) else 2 for d in shape]
        if t == TensorProto.BOOL:
            out[name] = np.asarray(rng.random(dims) > 0.5)
        else:
            dt = np.float32 if t == _F32 else np.float64
            out[name] = np.asarray(rng.standard_normal(dims) + 0.1).astype(dt)
    return out


def _allows(op: str, type_str: str) -> bool:
    """Whether the op's schema takes `type_str` for its type parameter T (Celu: float only)."""
    schema = onnx.defs.get_schema(op, _OPSET)
    allowed = [c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == "T"]
    return not allowed or type_str in allowed[0]


def _single(op: str, t: int) -> tuple[onnx.ModelProto, Inputs]:
    n = _ARITY.get(op, 2 if op in _BINARY else 1)
    shapes: list[list[int | str]] = [[4, 3, 5], [1, 3, 1], [5]]
    shapes = shapes[:n]
    names = ["a", "b", "c"][:n]
    types = [t] * n
    if op == "Where":
        types[0] = TensorProto.BOOL
    if op == "Clip":
        shapes[1:] = [[], []]
    inputs = {x: (ty, s) for x, ty, s in zip(names, types, shapes)}
    # a Relu after the op makes a two-node group; `a` is read dense, `b`/`c` broadcast
    nodes = [helper.make_node(op, names, ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    if op == "Where":
        inputs["c"] = (t, [4, 3, 5])
    return _model(nodes, inputs, ["y"]), inputs


def cases(seed: int = 0) -> Iterator[Case]:
    """(name, model, feeds) for every representative graph."""
    rng = np.random.default_rng(seed)
    for t, tn in ((_F32, "f32"), (_F64, "f64")):
        for op in FUSED_OPS:
            if not _allows(op, "tensor(double)" if t == _F64 else "tensor(float)"):
                continue
            model, inputs = _single(op, t)
            yield f"{op}_{tn}", model, _feeds(inputs, rng)
    w = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "bias")
    mlp = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "bias"], ["h"]),
        helper.make_node("Gelu", ["h"], ["g"], approximate="tanh"),
        helper.make_node("Mul", ["g", "h"], ["y"]),
    ]
    inputs = {"x": (_F32, ["batch", 16])}
    model = _model(mlp, inputs, ["y"])
    model.graph.initializer.extend([w, bias])
    yield "mlp_bias_gelu", model, _feeds(inputs, rng)
    res = [
        helper.make_node("Add", ["x", "r"], ["s"]),
        helper.make_node("Relu", ["s"], ["a"]),
        helper.make_node("Mul", ["a", "scale"], ["b"]),
        helper.make_node("Sub", ["b", "shift"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["y"]),
        helper.make_node("Where", ["mask", "y", "x"], ["z"]),
        helper.make_node("Clip", ["z", "lo", "hi"], ["out"]),
    ]
    inputs = {
        "x": (_F32, [2, 8, 6, 6]),
        "r": (_F32, [2, 8, 6, 6]),
        "scale": (_F32, [1, 8, 1, 1]),
        "shift": (_F32, [8, 1, 1]),
        "mask": (TensorProto.BOOL, [6]),
        "lo": (_F32, []),
        "hi": (_F32, []),
    }
    yield "residual_block", _model(res, inputs, ["s", "out"]), _feeds(inputs, rng)
    yield from _layer_norms(rng)
    from turnout_testbed.zoo import bert_like

    bert = bert_like(layers=1, hidden=64, heads=4, seq=16)
    yield (
        "bert_like",
        bert,
        {
            "x": rng.standard_normal((1, 16, 64)).astype(np.float32),
            "attention_mask": np.ones((1, 16), np.int64),
        },
    )


def _layer_norms(rng: np.random.Generator) -> Iterator[Case]:
    """LayerNorm with the residual Add fused (its sum read outside too), and alone (float64,
    no bias): the row kernel's variants."""
    h = 40
    scale = numpy_helper.from_array(rng.standard_normal(h).astype(np.float32), "scale")
    bias = numpy_helper.from_array(rng.standard_normal(h).astype(np.float32), "bias")
    nodes = [
        helper.make_node("Add", ["x", "r"], ["s"]),
        helper.make_node("LayerNormalization", ["s", "scale", "bias"], ["n"], epsilon=1e-3),
        helper.make_node("Mul", ["n", "s"], ["y"]),
    ]
    inputs: Inputs = {"x": (_F32, ["batch", 3, h]), "r": (_F32, ["batch", 3, h])}
    model = _model(nodes, inputs, ["y"])
    model.graph.initializer.extend([scale, bias])
    yield "residual_layer_norm", model, _feeds(inputs, rng)
    scale64 = numpy_helper.from_array(rng.standard_normal(h).astype(np.float64), "scale")
    nodes = [helper.make_node("LayerNormalization", ["x", "scale"], ["y"], axis=-1)]
    inputs = {"x": (_F64, [5, h])}
    model = _model(nodes, inputs, ["y"])
    model.graph.initializer.append(scale64)
    yield "layer_norm_f64", model, _feeds(inputs, rng)
    nodes = [helper.make_node("LogSoftmax", ["x"], ["y"], axis=2)]
    inputs = {"x": (_F64, [2, 3, 300])}  # rows longer than a block
    yield "log_softmax_f64", _model(nodes, inputs, ["y"]), _feeds(inputs, rng)
