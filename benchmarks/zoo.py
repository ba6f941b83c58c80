"""The benchmark model zoo: the onnx package's nine light models plus the repo's builders.

The application-shaped models of `turnout_testbed.apps` (issue 13: `vad_like`, `crnn_ocr_like`,
`yolo_det_like`, `text_cnn_like`) bring their own inputs (`BenchModel.make_feeds`): a VAD fed a
random int64 for `sr` would run its 8 kHz branch on a 16 kHz chunk; `model_feeds()` picks them.

The light models (`onnx/backend/test/data/light/*.onnx`) ship without weights: every weight is a
`ConstantOfShape` filled with 0.02. `light_model()` replaces each of those nodes with a seeded
random initializer so that kernels see real data (and a model of constant weights cannot hide
a wrong index): He-scaled normals for Conv/Gemm weights (std sqrt(2 / fan_in)), small normals
for biases and BatchNormalization shift/mean, values near 1 for scales, positive values for
variances. The models are saved as IR 4 so that weights are constants, not
overridable inputs. `MODELS` maps a model name to a `BenchModel`; `feeds()` makes seeded inputs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = [
    "APP_MODELS",
    "LIGHT_MODELS",
    "MODELS",
    "BenchModel",
    "feeds",
    "get",
    "light_model",
    "model_feeds",
    "names",
]

LIGHT_MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)

# turnout_testbed.apps builders, by benchmark name (listed here so that this module need not
# import turnout to list the zoo)
APP_MODELS = ("vad_like", "crnn_ocr_like", "yolo_det_like", "text_cnn_like")

# symbolic dims of the builders' models, fixed for the benchmark
DIMS = {"batch": 1, "sequence": 128}


@dataclass(frozen=True)
class BenchModel:
    name: str
    build: Callable[[], onnx.ModelProto]
    source: str  # "onnx light model", "turnout_testbed.zoo" or "turnout_testbed.apps"
    make_feeds: Callable[[int], dict[str, np.ndarray]] | None = None  # seed -> inputs


def _light_dir() -> str:
    from onnx.backend.test.loader import DATA_DIR

    return os.path.join(DATA_DIR, "light")


def _role_of(name: str, consumers: dict[str, list[tuple[onnx.NodeProto, int]]]) -> str:
    """What a weight is for, from its first consumer (looking through Unsqueeze)."""
    for node, idx in consumers.get(name, []):
        if node.op_type == "Unsqueeze":
            return _role_of(node.output[0], consumers)
        if node.op_type == "BatchNormalization":
            return ("x", "scale", "shift", "shift", "var")[idx]
        if node.op_type in ("Conv", "Gemm", "MatMul") and idx == 1:
            return "weight_T" if node.op_type == "Gemm" and _trans_b(node) else "weight"
        if node.op_type == "Mul":
            return "scale"
        return "shift"
    return "shift"


def _trans_b(node: onnx.NodeProto) -> bool:
    return any(a.name == "transB" and a.i == 1 for a in node.attribute)


def _random_weight(shape: tuple[int, ...], role: str, rng: np.random.Generator) -> np.ndarray:
    if role in ("weight", "weight_T") and len(shape) >= 2:
        if role == "weight_T" or len(shape) > 2:  # [out, in, ...] (Conv, Gemm transB)
            fan_in = int(np.prod(shape[1:]))
        else:  # Gemm/MatMul [in, out]
            fan_in = shape[0]
        w: np.ndarray = rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))
    elif role == "scale":
        w = 1.0 + 0.1 * rng.standard_normal(shape)
    elif role == "var":
        w = 0.5 + rng.random(shape)
    elif len(shape) >= 2:  # a weight of another use (e.g. reshaped first): He on last dims
        w = rng.standard_normal(shape) * np.sqrt(2.0 / max(int(np.prod(shape[1:])), 1))
    else:
        w = 0.1 * rng.standard_normal(shape)
    return w


def light_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """A light model with its ConstantOfShape weights replaced by seeded random initializers."""
    model = onnx.load(os.path.join(_light_dir(), f"light_{name}.onnx"))
    g = model.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in g.initializer}
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in g.node:
        for i, inp in enumerate(node.input):
            consumers.setdefault(inp, []).append((node, i))
    keep: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    used_shapes: set[str] = set()
    for node in g.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
            keep.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        dtype = numpy_helper.to_array(value).dtype if value is not None else np.dtype(np.float32)
        w = _random_weight(shape, _role_of(node.output[0], consumers), rng).astype(dtype)
        new_inits.append(numpy_helper.from_array(w, node.output[0]))
        used_shapes.add(node.input[0])
    still_used = {i for n in keep for i in n.input}
    dead = {s for s in used_shapes if s not in still_used}
    # Stored initializers of the file are kept, except BatchNormalization variances that are not
    # positive (the light files hold arbitrary numbers there; a negative variance makes NaNs).
    fixed: list[onnx.TensorProto] = []
    for t in g.initializer:
        if t.name in dead:
            continue
        if _role_of(t.name, consumers) == "var":
            arr = numpy_helper.to_array(t)
            if (arr <= 0).any():
                t = numpy_helper.from_array((np.abs(arr) + 0.5).astype(arr.dtype), t.name)
        fixed.append(t)
    # IR 3 lists every initializer as a graph input, which makes it an overridable input that
    # neither runtime may constant-fold; the weights are constants, so say so (IR 4).
    model.ir_version = max(model.ir_version, 4)
    names_ = {t.name for t in fixed + new_inits}
    inputs = [i for i in g.input if i.name not in dead and i.name not in names_]
    del g.node[:]
    g.node.extend(keep)
    del g.initializer[:]
    g.initializer.extend(fixed + new_inits)
    del g.input[:]
    g.input.extend(inputs)
    return model


def _builder(name: str, fn: Callable[[Any], onnx.ModelProto]) -> BenchModel:
    """A repo builder, imported on use (child processes measuring memory need not load turnout)."""

    def build() -> onnx.ModelProto:
        from turnout_testbed import zoo as builders

        return fn(builders)

    return BenchModel(name, build, "turnout_testbed.zoo")


def _app(name: str) -> BenchModel:
    """An application-shaped builder at its benchmark settings, with its own inputs."""

    def build() -> onnx.ModelProto:
        from turnout_testbed.apps import APP_MODELS as apps

        return apps[name].build()

    def make_feeds(seed: int) -> dict[str, np.ndarray]:
        from turnout_testbed.apps import APP_MODELS as apps

        return apps[name].feeds(seed)

    return BenchModel(name, build, "turnout_testbed.apps", make_feeds)


MODELS: dict[str, BenchModel] = {
    **{
        n: BenchModel(n, functools.partial(light_model, n), "onnx light model")
        for n in LIGHT_MODELS
    },
    "mlp": _builder("mlp", lambda z: z.mlp(batch=64)),
    "bert_like": _builder(
        "bert_like", lambda z: z.bert_like(layers=4, hidden=768, heads=12, seq=128)
    ),
    "resnet18_like": _builder("resnet18_like", lambda z: z.resnet18_like(size=224)),
    "tiny_ops_chain": _builder("tiny_ops_chain", lambda z: z.tiny_ops_chain(200)),
    **{n: _app(n) for n in APP_MODELS},
}


def names() -> list[str]:
    return list(MODELS)


def get(name: str) -> BenchModel:
    """A zoo model by name; `tiny_ops_chain(N)` builds a chain of N ops."""
    if name in MODELS:
        return MODELS[name]
    if name.startswith("tiny_ops_chain(") and name.endswith(")"):
        n = int(name[len("tiny_ops_chain(") : -1])
        return _builder(name, lambda z: z.tiny_ops_chain(n))
    raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}, tiny_ops_chain(N)")


def feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input that is not an initializer."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [
            d.dim_value if d.HasField("dim_value") else DIMS.get(d.dim_param, 1)
            for d in tt.shape.dim
        ]
        dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dt.kind == "f":
            out[vi.name] = rng.standard_normal(shape).astype(dt)
        elif "mask" in vi.name:
            out[vi.name] = np.ones(shape, dt)
        else:
            out[vi.name] = rng.integers(0, 10, shape).astype(dt)
    return out


def model_feeds(name: str, model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """The inputs of zoo model `name`: its own when it brings them, else `feeds(model)`."""
    bm = get(name)
    return bm.make_feeds(seed) if bm.make_feeds is not None else feeds(model, seed)


def describe(model: onnx.ModelProto) -> dict[str, Any]:
    """Node count and op histogram (for the JSON report); `nodes_with_subgraphs` also counts
    the nodes of If/Loop/Scan bodies."""
    ops: dict[str, int] = {}
    for n in model.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1

    def count(graph: onnx.GraphProto) -> int:
        return sum(
            1 + sum(count(a.g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
            for n in graph.node
        )

    return {
        "nodes": len(model.graph.node),
        "nodes_with_subgraphs": count(model.graph),
        "ops": dict(sorted(ops.items())),
    }
