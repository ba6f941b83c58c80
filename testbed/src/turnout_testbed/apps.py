"""Builders of models shaped like the small models applications ship (issue 13).

The zoo's models (`turnout_testbed.zoo`) are large, regular graphs. The models users run on a
CPU are small and irregular: recurrent state, control flow, depthwise convolutions, shape arithmetic
written out node by node by exporters, decoding arithmetic after the last convolution. A runtime
that is fast on resnet50 can still lose to onnxruntime on those through per-node overhead, so
the benchmark needs them. Each builder writes the structure an exporter writes, with seeded
He-scaled weights (std sqrt(2 / fan_in)), opset 17, and is checked by onnx.checker:

- `vad_like`: a voice-activity detector like Silero VAD: an `If` on `Equal(sr, 16000)` whose
  branches (16 kHz and 8 kHz) each hold a reflect Pad, an STFT as a fixed-weight Conv1D,
  magnitude, four Conv1D+ReLU encoder layers, an LSTM cell with the recurrent state in and out,
  a Conv1D head, Sigmoid and ReduceMean. The branch bodies are written the way torch's exporter
  writes a scripted module: a `Constant` node per shape, axis and weight, shapes computed with
  Shape/Gather/Unsqueeze/Concat.
- `crnn_ocr_like`: a text-line recognizer (PP-OCR style): depthwise-separable conv blocks with
  BatchNormalization and HardSwish/ReLU, Max/AveragePool, a bidirectional LSTM, a CTC head.
- `yolo_det_like`: a detector: a small SiLU conv backbone and three YOLO-style heads decoded
  in-graph (Reshape/Transpose/Sigmoid/Split/Mul/Add over grid and anchor constants).
- `text_cnn_like`: a text classifier: embedding Gather, Conv1D of widths 3/4/5, max pooling
  over time, Concat, Gemm, Softmax.

Each builder has a `*_feeds` companion that makes inputs of the kind the application feeds
(quiet audio and a valid sample rate, normalized pixels, token ids within the vocabulary);
`APP_MODELS` maps the benchmark names to both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "APP_MODELS",
    "AppModel",
    "crnn_ocr_feeds",
    "crnn_ocr_like",
    "text_cnn_feeds",
    "text_cnn_like",
    "vad_feeds",
    "vad_like",
    "yolo_det_feeds",
    "yolo_det_like",
]

F = TensorProto.FLOAT
I64 = TensorProto.INT64
OPSET = 17
INT64_MIN_END = -9223372036854775807  # the `end` torch's exporter writes for a reversed slice


class _Graph:
    """Nodes and weights of one graph or branch body.

    Small values (shapes, axes, scalars) are always `Constant` nodes, one per use, as exporters
    write them. Weights are initializers of the main graph, or `Constant` nodes in a branch
    body (`weights_as_nodes`), so a runtime has to fold them per branch. Every name carries
    `prefix`, so two branch bodies never define the same name.
    """

    def __init__(
        self, rng: np.random.Generator, prefix: str = "", weights_as_nodes: bool = False
    ) -> None:
        self.rng = rng
        self.prefix = prefix
        self.weights_as_nodes = weights_as_nodes
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{self.prefix}{hint}_{self._n}"

    def const(self, value: Any, hint: str = "Constant") -> str:
        """A `Constant` node (int lists become int64, floats float32)."""
        arr = np.asarray(value)
        if arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
        elif arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        out = self.name(hint)
        tensor = numpy_helper.from_array(arr, out + "_value")
        self.nodes.append(helper.make_node("Constant", [], [out], name=out + "_node", value=tensor))
        return out

    def tensor(self, value: np.ndarray, hint: str = "w") -> str:
        """A weight: an initializer, or a `Constant` node in a branch body."""
        if self.weights_as_nodes:
            return self.const(value, hint)
        out = self.name(hint)
        self.inits.append(numpy_helper.from_array(value, out))
        return out

    def he(self, *shape: int, fan_in: int | None = None) -> np.ndarray:
        fan = fan_in if fan_in is not None else int(np.prod(shape[1:]))
        w: np.ndarray = self.rng.standard_normal(shape) * np.sqrt(2.0 / max(fan, 1))
        return w.astype(np.float32)

    def small(self, *shape: int, scale: float = 0.1) -> np.ndarray:
        w: np.ndarray = self.rng.standard_normal(shape) * scale
        return w.astype(np.float32)

    def ops(self, op: str, inputs: Sequence[str], n_out: int, **attrs: Any) -> list[str]:
        outs = [self.name(f"{op}_output") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.name(op), **attrs))
        return outs

    def op(self, op: str, inputs: Sequence[str], **attrs: Any) -> str:
        return self.ops(op, inputs, 1, **attrs)[0]

    # -- shape arithmetic the way exporters write it
    def dim(self, x: str, axis: int) -> str:
        """x.shape[axis] as a 1-element int64 tensor: Shape -> Gather -> Unsqueeze."""
        d = self.op("Gather", [self.op("Shape", [x]), self.const(np.int64(axis))], axis=0)
        return self.op("Unsqueeze", [d, self.const([0])])

    def reshape(self, x: str, parts: Sequence[str | int]) -> str:
        """Reshape to a shape concatenated from computed dims (str) and constants (int)."""
        pieces = [p if isinstance(p, str) else self.const([p]) for p in parts]
        return self.op("Reshape", [x, self.op("Concat", pieces, axis=0)])

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        return self.op("Unsqueeze", [x, self.const(list(axes))])

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        return self.op("Squeeze", [x, self.const(list(axes))])

    def slice(self, x: str, start: int | str, end: int | str, axis: int, step: int = 1) -> str:
        s = start if isinstance(start, str) else self.const([start])
        e = end if isinstance(end, str) else self.const([end])
        return self.op("Slice", [x, s, e, self.const([axis]), self.const([step])])

    def torch_pad(self, x: str, pads: Sequence[int], rank: int, mode: str) -> str:
        """F.pad(x, pads, mode) as torch's exporter writes it: torch's (last dim first,
        begin/end pairs) list turned into ONNX's order by Concat/Reshape/Slice/Transpose."""
        zeros = self.op(
            "ConstantOfShape",
            [self.const([2 * rank - len(pads)])],
            value=helper.make_tensor("value", I64, [1], [0]),
        )
        full = self.op("Concat", [self.const(list(pads)), zeros], axis=0)
        rows = self.op("Reshape", [full, self.const([-1, 2])])
        rows = self.slice(rows, -1, INT64_MIN_END, axis=0, step=-1)
        flat = self.op("Reshape", [self.op("Transpose", [rows], perm=[1, 0]), self.const([-1])])
        return self.op("Pad", [x, self.op("Cast", [flat], to=I64)], mode=mode)

    # -- layers
    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: Sequence[int],
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        group: int = 1,
        bias: bool = True,
    ) -> str:
        k = list(kernel)
        w = self.tensor(self.he(cout, cin // group, *k), "weight")
        inputs = [x, w] + ([self.tensor(self.small(cout), "bias")] if bias else [])
        return self.op(
            "Conv",
            inputs,
            kernel_shape=k,
            strides=list(strides or [1] * len(k)),
            pads=list(pads if pads is not None else [kk // 2 for kk in k] * 2),
            group=group,
        )

    def batch_norm(self, x: str, c: int) -> str:
        scale = (1 + 0.1 * self.rng.standard_normal(c)).astype(np.float32)
        var = (0.5 + self.rng.random(c)).astype(np.float32)
        params = [scale, self.small(c), self.small(c), var]
        names = ("scale", "shift", "mean", "var")
        inputs = [self.tensor(p, n) for p, n in zip(params, names)]
        return self.op("BatchNormalization", [x, *inputs], epsilon=1e-5)

    def lstm_weights(self, input_size: int, hidden: int, directions: int) -> tuple[str, str, str]:
        w = self.he(directions, 4 * hidden, input_size, fan_in=input_size)
        r = self.he(directions, 4 * hidden, hidden, fan_in=hidden)
        b = self.small(directions, 8 * hidden)
        return self.tensor(w, "W"), self.tensor(r, "R"), self.tensor(b, "B")

    def model(
        self,
        name: str,
        inputs: list[onnx.ValueInfoProto],
        outputs: list[onnx.ValueInfoProto],
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        model.producer_name = "turnout_testbed.apps"
        onnx.checker.check_model(model, full_check=True)
        return model


# ---------------------------------------------------------------------------- VAD
def _stft_basis(filter_length: int) -> np.ndarray:
    """Hann-windowed real DFT rows, [2 * bins, 1, filter_length]: the cosines (real part) then
    the negated sines (imaginary part), as an STFT written as a strided Conv1D uses them."""
    bins = filter_length // 2 + 1
    n = np.arange(filter_length)
    k = np.arange(bins)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / filter_length)
    angle = 2 * np.pi * k * n / filter_length
    basis = np.concatenate([np.cos(angle), -np.sin(angle)]) * window
    return basis[:, None, :].astype(np.float32)


def _vad_branch(rng: np.random.Generator, prefix: str, filter_length: int) -> onnx.GraphProto:
    """One sample rate's detector, reading the outer scope's `input` and `state`."""
    g = _Graph(rng, prefix, weights_as_nodes=True)
    hop = filter_length // 2
    bins = filter_length // 2 + 1
    hidden = 128
    # x.view(batch, 1, -1), then the STFT's reflect padding on the right
    x = g.reshape("input", [g.dim("input", 0), 1, -1])
    x = g.torch_pad(x, [0, filter_length // 4], rank=3, mode="reflect")
    spec = g.op(
        "Conv",
        [x, g.tensor(_stft_basis(filter_length), "forward_basis")],
        kernel_shape=[filter_length],
        strides=[hop],
        pads=[0, 0],
    )
    # magnitude: real part spec[:, :bins], imaginary part spec[:, bins:]
    real = g.slice(spec, 0, bins, axis=1)
    imag = g.slice(spec, bins, g.dim(spec, 1), axis=1)
    power = g.op(
        "Add",
        [
            g.op("Pow", [real, g.const(np.float32(2.0))]),
            g.op("Pow", [imag, g.const(np.float32(2.0))]),
        ],
    )
    x = g.op("Sqrt", [power])
    # encoder
    for cin, cout, stride in ((bins, 128, 1), (128, 64, 2), (64, 64, 2), (64, 128, 1)):
        x = g.op("Relu", [g.conv(x, cin, cout, [3], strides=[stride], pads=[1, 1])])
    # decoder: torch's LSTMCell, scripted: the rank checks became nested Ifs whose branches
    # differ in rank (Unsqueeze vs Identity); only the batched (Identity) side runs here
    x = g.squeeze(x, [2])  # [B, 128, 1] -> [B, 128]: one frame per chunk
    unbatched = g.op("Not", [g.op("Equal", [g.op("Size", [g.op("Shape", [x])]), g.const(2)])])
    x = _rank_if(g, unbatched, x, "Unsqueeze")
    h = _rank_if(g, unbatched, g.op("Gather", ["state", g.const(np.int64(0))], axis=0), "Unsqueeze")
    c = _rank_if(g, unbatched, g.op("Gather", ["state", g.const(np.int64(1))], axis=0), "Unsqueeze")
    w, r, b = g.lstm_weights(hidden, hidden, 1)
    cell_in = [g.unsqueeze(x, [0]), w, r, b, "", g.unsqueeze(h, [0]), g.unsqueeze(c, [0])]
    _, y_h, y_c = g.ops("LSTM", cell_in, 3, hidden_size=hidden)
    h = _rank_if(g, unbatched, g.squeeze(y_h, [0]), "Squeeze")
    c = _rank_if(g, unbatched, g.squeeze(y_c, [0]), "Squeeze")
    new_state = g.op("Concat", [g.unsqueeze(h, [0]), g.unsqueeze(c, [0])], axis=0)  # stack
    x = g.op("Relu", [g.unsqueeze(h, [-1])])
    x = g.op("Sigmoid", [g.conv(x, hidden, 1, [1], pads=[0, 0])])
    # out = x.squeeze(1).mean(dim=1).unsqueeze(1)
    prob = g.op("ReduceMean", [g.squeeze(x, [1])], axes=[1], keepdims=0)
    prob = g.unsqueeze(prob, [1])
    outs = [
        helper.make_tensor_value_info(prob, F, ["batch", 1]),
        helper.make_tensor_value_info(new_state, F, [2, "batch", hidden]),
    ]
    return helper.make_graph(g.nodes, f"{prefix}branch", [], outs, g.inits)


def _rank_if(g: _Graph, cond: str, x: str, op: str) -> str:
    """`op(x, axes=[0]) if cond else x` as an If node (the branches' outputs differ in rank)."""
    name = g.name("If")
    then = _Graph(g.rng, f"{name}/then/")
    y = then.op(op, [x, then.const([0])])
    els = _Graph(g.rng, f"{name}/else/")
    z = els.op("Identity", [x])
    out = g.name("If_output")
    g.nodes.append(
        helper.make_node(
            "If",
            [cond],
            [out],
            name=name,
            then_branch=helper.make_graph(then.nodes, "then", [], [_untyped_shape(y)]),
            else_branch=helper.make_graph(els.nodes, "else", [], [_untyped_shape(z)]),
        )
    )
    return out


def _untyped_shape(name: str) -> onnx.ValueInfoProto:
    """A float tensor output of unknown shape: an If's branches may disagree on the rank."""
    return helper.make_tensor_value_info(name, F, None)


def vad_like(seed: int = 0) -> onnx.ModelProto:
    """A Silero-VAD-shaped detector: `input` [batch, samples] (512 at 16 kHz, 256 at 8 kHz),
    `state` [2, batch, 128], `sr` int64 scalar; outputs `output` [batch, 1] (speech
    probability) and `stateN` [2, batch, 128]. sr == 16000 takes the 16 kHz branch (STFT over
    256 samples, 129 bins), any other rate the 8 kHz one (128 samples, 65 bins)."""
    rng = np.random.default_rng(seed)
    g = _Graph(rng)
    cond = g.op("Equal", ["sr", g.const(np.int64(16000))])
    g.nodes.append(
        helper.make_node(
            "If",
            [cond],
            ["output", "stateN"],
            name="If_0",
            then_branch=_vad_branch(rng, "If_0_then_branch/", 256),
            else_branch=_vad_branch(rng, "If_0_else_branch/", 128),
        )
    )
    return g.model(
        "vad_like",
        [
            helper.make_tensor_value_info("input", F, ["batch", "samples"]),
            helper.make_tensor_value_info("state", F, [2, "batch", 128]),
            helper.make_tensor_value_info("sr", I64, []),
        ],
        [
            helper.make_tensor_value_info("output", F, ["batch", 1]),
            helper.make_tensor_value_info("stateN", F, [2, "batch", 128]),
        ],
    )


def vad_feeds(
    batch: int = 1, sr: int = 16000, seed: int = 0, state_scale: float = 0.1
) -> dict[str, np.ndarray]:
    """One chunk of quiet noise at `sr` (512 samples at 16 kHz, 256 otherwise) and a state."""
    rng = np.random.default_rng(seed)
    samples = 512 if sr == 16000 else 256
    return {
        "input": (0.1 * rng.standard_normal((batch, samples))).astype(np.float32),
        "state": (state_scale * rng.standard_normal((2, batch, 128))).astype(np.float32),
        "sr": np.array(sr, np.int64),
    }


# ---------------------------------------------------------------------------- OCR recognizer
def crnn_ocr_like(
    width: int | None = None, classes: int = 100, hidden: int = 96, seed: int = 0
) -> onnx.ModelProto:
    """A CRNN text-line recognizer: `x` [1, 3, 48, width] (width symbolic when None) to
    `probs` [1, width / 8, classes]: depthwise-separable blocks (3x3 depthwise + BN + HardSwish,
    1x1 pointwise + BN + ReLU), MaxPool and AveragePool down to height 1, a bidirectional LSTM,
    a MatMul/Add CTC head and Softmax."""
    g = _Graph(np.random.default_rng(seed))
    x = g.op("HardSwish", [g.batch_norm(g.conv("x", 3, 16, [3, 3], [2, 2], bias=False), 16)])
    # (in, out, depthwise stride, pool after): height 24 -> 1, width W/2 -> W/8
    blocks: list[tuple[int, int, tuple[int, int], str | None]] = [
        (16, 32, (1, 1), None),
        (32, 64, (2, 1), None),
        (64, 64, (1, 1), "max"),
        (64, 128, (1, 1), None),
        (128, 128, (2, 1), None),
        (128, 256, (1, 1), None),
        (256, 256, (1, 1), None),
        (256, 384, (1, 1), "avg"),
    ]
    for cin, cout, stride, pool in blocks:
        dw = g.conv(x, cin, cin, [3, 3], list(stride), group=cin, bias=False)
        x = g.op("HardSwish", [g.batch_norm(dw, cin)])
        pw = g.conv(x, cin, cout, [1, 1], pads=[0, 0, 0, 0], bias=False)
        x = g.op("Relu", [g.batch_norm(pw, cout)])
        if pool == "max":
            x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        elif pool == "avg":
            x = g.op("AveragePool", [x], kernel_shape=[3, 2], strides=[3, 2])
    # [1, C, 1, T] -> [T, 1, C]
    seq = g.op("Transpose", [g.squeeze(x, [2])], perm=[2, 0, 1])
    w, r, b = g.lstm_weights(384, hidden, 2)
    y = g.ops("LSTM", [seq, w, r, b], 3, hidden_size=hidden, direction="bidirectional")[0]
    # [T, 2, 1, H] -> [T, 1, 2H] -> [1, T, 2H]
    y = g.op("Reshape", [g.op("Transpose", [y], perm=[0, 2, 1, 3]), g.const([0, 0, -1])])
    y = g.op("Transpose", [y], perm=[1, 0, 2])
    logits = g.op(
        "Add",
        [
            g.op("MatMul", [y, g.tensor(g.he(2 * hidden, classes, fan_in=2 * hidden), "fc_w")]),
            g.tensor(g.small(classes), "fc_b"),
        ],
    )
    g.nodes.append(helper.make_node("Softmax", [logits], ["probs"], name="softmax", axis=2))
    wdim: int | str = width if width is not None else "width"
    tdim: int | str = width // 8 if width is not None else "steps"
    return g.model(
        "crnn_ocr_like",
        [helper.make_tensor_value_info("x", F, [1, 3, 48, wdim])],
        [helper.make_tensor_value_info("probs", F, [1, tdim, classes])],
    )


def crnn_ocr_feeds(width: int = 320, seed: int = 0) -> dict[str, np.ndarray]:
    """A normalized text-line image, 48 high (width a multiple of 8)."""
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, 3, 48, width)).astype(np.float32)}


# ---------------------------------------------------------------------------- detector
_ANCHORS = (  # pixels, (w, h) per anchor, for strides 8, 16, 32 (YOLOv5's defaults)
    ((10, 13), (16, 30), (33, 23)),
    ((30, 61), (62, 45), (59, 119)),
    ((116, 90), (156, 198), (373, 326)),
)


def _silu_conv(g: _Graph, x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
    """Conv (BatchNormalization folded in by the exporter) + SiLU written as x * sigmoid(x)."""
    y = g.conv(x, cin, cout, [k, k], [stride, stride])
    return g.op("Mul", [y, g.op("Sigmoid", [y])])


def _bottleneck(g: _Graph, x: str, c: int) -> str:
    y = _silu_conv(g, _silu_conv(g, x, c, c, 1), c, c, 3)
    return g.op("Add", [x, y])


def _decode_head(g: _Graph, feat: str, stride: int, anchors: Any, size: int, nc: int) -> str:
    """One head: [B, na*(5+nc), ny, nx] -> boxes in pixels and confidences [B, na*ny*nx, 5+nc]."""
    na, no = len(anchors), 5 + nc
    ny = nx = size // stride
    y = g.conv(feat, _FEAT_CHANNELS[stride], na * no, [1, 1], pads=[0, 0, 0, 0])
    bs = g.dim(y, 0)
    y = g.reshape(y, [bs, na, no, g.dim(y, 2), g.dim(y, 3)])
    y = g.op("Sigmoid", [g.op("Transpose", [y], perm=[0, 1, 3, 4, 2])])
    xy, wh, conf = g.ops("Split", [y, g.const([2, 2, nc + 1])], 3, axis=4)
    gy, gx = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    grid = np.broadcast_to(np.stack([gx, gy], -1) - 0.5, (1, na, ny, nx, 2))
    anchor_grid = np.broadcast_to(
        np.asarray(anchors, np.float32)[None, :, None, None, :], (1, na, ny, nx, 2)
    )
    two = np.float32(2.0)
    xy = g.op("Add", [g.op("Mul", [xy, g.const(two)]), g.tensor(grid.astype(np.float32), "grid")])
    xy = g.op("Mul", [xy, g.const(np.float32(stride))])
    wh = g.op("Pow", [g.op("Mul", [wh, g.const(two)]), g.const(two)])
    wh = g.op("Mul", [wh, g.tensor(np.ascontiguousarray(anchor_grid), "anchor_grid")])
    y = g.op("Concat", [xy, wh, conf], axis=4)
    return g.reshape(y, [bs, -1, no])


_FEAT_CHANNELS = {8: 64, 16: 128, 32: 256}  # the backbone's channels at each head's stride


def yolo_det_like(size: int = 320, classes: int = 80, seed: int = 0) -> onnx.ModelProto:
    """A YOLO-style detector: `images` [batch, 3, size, size] to `boxes` [batch, N, 4] (x1, y1,
    x2, y2 in pixels) and `scores` [batch, N, classes] (objectness * class), N = 3 anchors over
    the stride 8, 16 and 32 grids. Backbone: SiLU convs, residual bottlenecks, an SPPF block."""
    g = _Graph(np.random.default_rng(seed))
    x = _silu_conv(g, "images", 3, 16, 3, 2)
    x = _bottleneck(g, _silu_conv(g, x, 16, 32, 3, 2), 32)
    p3 = _bottleneck(g, _silu_conv(g, x, 32, 64, 3, 2), 64)
    p4 = _bottleneck(g, _silu_conv(g, p3, 64, 128, 3, 2), 128)
    x = _silu_conv(g, p4, 128, 256, 3, 2)
    # SPPF: three chained 5x5 max pools, concatenated, mixed by a 1x1 conv
    x = _silu_conv(g, x, 256, 128, 1)
    pools = [x]
    for _ in range(3):
        pools.append(g.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], pads=[2, 2, 2, 2]))
    p5 = _silu_conv(g, g.op("Concat", pools, axis=1), 512, 256, 1)
    heads = [
        _decode_head(g, p, s, a, size, classes)
        for p, s, a in zip((p3, p4, p5), (8, 16, 32), _ANCHORS)
    ]
    pred = g.op("Concat", heads, axis=1)
    box, obj, cls = g.ops("Split", [pred, g.const([4, 1, classes])], 3, axis=2)
    xy, wh = g.ops("Split", [box, g.const([2, 2])], 2, axis=2)
    half = g.op("Mul", [wh, g.const(np.float32(0.5))])
    corners = [g.op("Sub", [xy, half]), g.op("Add", [xy, half])]
    g.nodes.append(helper.make_node("Concat", corners, ["boxes"], name="boxes", axis=2))
    g.nodes.append(helper.make_node("Mul", [cls, obj], ["scores"], name="scores"))
    n = 3 * sum((size // s) ** 2 for s in (8, 16, 32))
    return g.model(
        "yolo_det_like",
        [helper.make_tensor_value_info("images", F, ["batch", 3, size, size])],
        [
            helper.make_tensor_value_info("boxes", F, ["batch", n, 4]),
            helper.make_tensor_value_info("scores", F, ["batch", n, classes]),
        ],
    )


def yolo_det_feeds(size: int = 320, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """An image with pixel values in [0, 1], as detectors are fed."""
    rng = np.random.default_rng(seed)
    return {"images": rng.random((batch, 3, size, size)).astype(np.float32)}


# ---------------------------------------------------------------------------- text classifier
def text_cnn_like(
    seq: int = 128,
    vocab: int = 5000,
    dim: int = 64,
    filters: int = 100,
    classes: int = 10,
    seed: int = 0,
) -> onnx.ModelProto:
    """A Kim-style text CNN: `input_ids` int64 [batch, seq] to `probs` [batch, classes]:
    embedding Gather, Conv1D of widths 3, 4 and 5 with ReLU, max over time (GlobalMaxPool for
    one width, ReduceMax for the others, as different exporters write it), Concat, Gemm,
    Softmax."""
    g = _Graph(np.random.default_rng(seed))
    table = g.tensor(g.small(vocab, dim, scale=1.0), "embedding")
    emb = g.op("Gather", [table, "input_ids"], axis=0)
    x = g.op("Transpose", [emb], perm=[0, 2, 1])  # [B, dim, seq]
    pooled = []
    for k in (3, 4, 5):
        y = g.op("Relu", [g.conv(x, dim, filters, [k], pads=[0, 0])])
        if k == 3:
            pooled.append(g.op("Flatten", [g.op("GlobalMaxPool", [y])], axis=1))
        elif k == 4:
            pooled.append(g.op("ReduceMax", [y], axes=[2], keepdims=0))
        else:
            pooled.append(g.squeeze(g.op("ReduceMax", [y], axes=[2], keepdims=1), [2]))
    h = g.op("Concat", pooled, axis=1)
    fc_w = g.tensor(g.he(classes, 3 * filters), "fc_w")
    logits = g.op("Gemm", [h, fc_w, g.tensor(g.small(classes), "fc_b")], transB=1)
    g.nodes.append(helper.make_node("Softmax", [logits], ["probs"], name="softmax", axis=1))
    return g.model(
        "text_cnn_like",
        [helper.make_tensor_value_info("input_ids", I64, ["batch", seq])],
        [helper.make_tensor_value_info("probs", F, ["batch", classes])],
    )


def text_cnn_feeds(
    seq: int = 128, vocab: int = 5000, batch: int = 1, seed: int = 0
) -> dict[str, np.ndarray]:
    """Token ids drawn over the whole vocabulary."""
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64)}


# ---------------------------------------------------------------------------- index
@dataclass(frozen=True)
class AppModel:
    """A builder at its benchmark settings and the inputs that go with it."""

    build: Callable[[], onnx.ModelProto]
    feeds: Callable[[int], dict[str, np.ndarray]]  # seed -> inputs


APP_MODELS: dict[str, AppModel] = {
    "vad_like": AppModel(vad_like, lambda seed: vad_feeds(seed=seed)),
    "crnn_ocr_like": AppModel(crnn_ocr_like, lambda seed: crnn_ocr_feeds(320, seed=seed)),
    "yolo_det_like": AppModel(yolo_det_like, lambda seed: yolo_det_feeds(320, seed=seed)),
    "text_cnn_like": AppModel(text_cnn_like, lambda seed: text_cnn_feeds(seed=seed)),
}
