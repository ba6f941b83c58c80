"""com.microsoft.nchwc: the blocked-layout ops onnxruntime writes into models it optimizes at
ORT_ENABLE_ALL (ReorderInput/ReorderOutput around Conv, pools and Upsample). Their values are
NCHWc blocks (`turnout.graph.contrib.nchwc_layout`): shapes [N, Cp, H, W], Cp a whole number
of blocks.
"""

from __future__ import annotations

from turnout.graph.contrib.inference import Dim, NodeTypes, TensorType
from turnout.graph.contrib.nchwc_layout import DOMAIN, block_size, padded_channels
from turnout.graph.contrib.ops.quantized_elementwise import window_output
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

__all__: list[str] = []

_T = {"T": ("float",)}
_X, _Y = (Arg("X", "T"),), (Arg("Y", "T"),)


def _reorder_input(types: NodeTypes) -> list[TensorType | None]:
    x = types.input(0)
    if x is None or x.shape is None or len(x.shape) < 2:
        return [None if x is None else TensorType(x.elem_type)]
    last = bool(types.attr("channels_last", 0))
    c = x.shape[-1] if last else x.shape[1]
    spatial = x.shape[1:-1] if last else x.shape[2:]
    cp: Dim = padded_channels(c, block_size()) if isinstance(c, int) else None
    return [TensorType(x.elem_type, (x.shape[0], cp, *spatial))]


def _reorder_output(types: NodeTypes) -> list[TensorType | None]:
    x, c = types.input(0), int(types.attr("channels", 0))
    if x is None or x.shape is None or len(x.shape) < 2 or c <= 0:
        return [None if x is None else TensorType(x.elem_type)]
    spatial = x.shape[2:]
    last = bool(types.attr("channels_last", 0))
    shape = (x.shape[0], *spatial, c) if last else (x.shape[0], c, *spatial)
    return [TensorType(x.elem_type, shape)]


def _windowed(
    types: NodeTypes, x: TensorType, channels: Dim, kernel: list[int], ceil: bool
) -> list[TensorType | None]:
    assert x.shape is not None
    nd = len(x.shape) - 2
    strides = list(types.attr("strides", []) or [1] * nd)
    dilations = list(types.attr("dilations", []) or [1] * nd)
    pads = list(types.attr("pads", []) or [0] * (2 * nd))
    auto = str(types.attr("auto_pad", "NOTSET"))
    spans = [(kernel[i] - 1) * dilations[i] + 1 for i in range(nd)]
    out = tuple(
        window_output(x.shape[2 + i], spans[i], strides[i], (pads[i], pads[i + nd]), auto, ceil)
        for i in range(nd)
    )
    return [TensorType(x.elem_type, (x.shape[0], channels, *out))]


def _conv(types: NodeTypes) -> list[TensorType | None]:
    x, w = types.input(0), types.input(1)
    if x is None or x.shape is None or w is None or w.shape is None or len(x.shape) < 3:
        return [None if x is None else TensorType(x.elem_type)]
    kernel = list(types.attr("kernel_shape", []) or w.shape[2:])
    if not all(isinstance(k, int) for k in kernel):
        return [TensorType(x.elem_type)]
    return _windowed(types, x, w.shape[0], kernel, False)


def _pool(types: NodeTypes) -> list[TensorType | None]:
    x = types.input(0)
    if x is None or x.shape is None or len(x.shape) < 3:
        return [None if x is None else TensorType(x.elem_type)]
    kernel = list(types.attr("kernel_shape", []))
    return _windowed(types, x, x.shape[1], kernel, bool(types.attr("ceil_mode", 0)))


def _global_pool(types: NodeTypes) -> list[TensorType | None]:
    x = types.input(0)
    if x is None or x.shape is None or len(x.shape) < 3:
        return [None if x is None else TensorType(x.elem_type)]
    return [TensorType(x.elem_type, (*x.shape[:2], *(1,) * (len(x.shape) - 2)))]


def _upsample(types: NodeTypes) -> list[TensorType | None]:
    x, scales = types.input(0), list(types.attr("scales", []) or [])
    if x is None or x.shape is None or len(scales) != len(x.shape):
        return [None if x is None else TensorType(x.elem_type)]
    shape = tuple(d * s if isinstance(d, int) else None for d, s in zip(x.shape, scales))
    return [TensorType(x.elem_type, shape)]


_WINDOW = (
    Attr("auto_pad", "string", "NOTSET"),
    Attr("dilations", "ints"),
    Attr("pads", "ints"),
    Attr("strides", "ints"),
)
_POOL = (*_WINDOW, Attr("ceil_mode", "int", 0), Attr("kernel_shape", "ints", required=True))

define(
    OpSpec(
        "ReorderInput", _X, _Y, _T, _reorder_input,
        attrs=(Attr("channels_last", "int", 0),), domain=DOMAIN,
    )
)  # fmt: skip
define(
    OpSpec(
        "ReorderOutput", _X, _Y, _T, _reorder_output,
        attrs=(Attr("channels", "int", 0), Attr("channels_last", "int", 0)), domain=DOMAIN,
    )
)  # fmt: skip
define(
    OpSpec(
        "Conv",
        (*_X, Arg("W", "T"), Arg("B", "T", optional=True), Arg("Sum", "T", optional=True)),
        _Y,
        _T,
        _conv,
        attrs=(
            *_WINDOW,
            Attr("activation", "string"),
            Attr("activation_params", "floats"),
            Attr("group", "int", 1),
            Attr("kernel_shape", "ints"),
        ),
        domain=DOMAIN,
    )
)
define(
    OpSpec(
        "MaxPool", _X, _Y, _T, _pool,
        attrs=(*_POOL, Attr("storage_order", "int", 0)), domain=DOMAIN,
    )
)  # fmt: skip
define(
    OpSpec(
        "AveragePool", _X, _Y, _T, _pool,
        attrs=(*_POOL, Attr("count_include_pad", "int", 0)), domain=DOMAIN,
    )
)  # fmt: skip
for _name in ("GlobalAveragePool", "GlobalMaxPool"):
    define(OpSpec(_name, _X, _Y, _T, _global_pool, domain=DOMAIN))
define(
    OpSpec(
        "Upsample", _X, _Y, _T, _upsample,
        attrs=(
            Attr("coordinate_transformation_mode", "string", "asymmetric"),
            Attr("mode", "string", "nearest"),
            Attr("scales", "ints"),
        ),
        domain=DOMAIN,
    )
)  # fmt: skip
