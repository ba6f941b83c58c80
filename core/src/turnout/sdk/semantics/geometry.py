"""Sliding-window geometry of Conv, ConvInteger, QLinearConv and the pooling ops.

Every provider derives a window op's strides, dilations, pads and output size here, so that an
`auto_pad` value, a kernel larger than the padded input or a `kernel_shape` that contradicts W
is the same `InvalidArgument` whichever provider runs the node.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnout.graph.errors import InvalidArgument
from turnout.sdk.provider import KernelNode

__all__ = [
    "check_conv_channels",
    "conv_geometry",
    "conv_kernel_shape",
    "pool_kernel_shape",
    "spatial_attrs",
]


def spatial_attrs(node: KernelNode, nd: int, kernel: Sequence[int]) -> tuple[list[int], list[int]]:
    """(strides, dilations) with ONNX defaults of 1, checked to have `nd` entries each."""
    strides = list(node.attr("strides", None) or [1] * nd)
    dilations = list(node.attr("dilations", None) or [1] * nd)
    if len(strides) != nd or len(dilations) != nd or len(kernel) != nd:
        raise InvalidArgument(
            f"{node.name}: strides/dilations/kernel_shape must have {nd} entries "
            f"for a {nd}-D spatial input"
        )
    return strides, dilations


def conv_kernel_shape(
    node: KernelNode, x_shape: Sequence[int], w_shape: Sequence[int]
) -> list[int]:
    """The spatial kernel of a convolution: `kernel_shape` if given (it must equal W's), else
    W's trailing dims. X and W must have the same rank, at least 3."""
    if len(x_shape) < 3 or len(w_shape) != len(x_shape):
        raise InvalidArgument(
            f"{node.name}: X {tuple(x_shape)} and W {tuple(w_shape)} must be N-D with N >= 3"
        )
    kernel = list(node.attr("kernel_shape", None) or w_shape[2:])
    if tuple(kernel) != tuple(w_shape[2:]):
        raise InvalidArgument(
            f"{node.name}: kernel_shape {kernel} does not match W {tuple(w_shape)}"
        )
    return kernel


def check_conv_channels(
    name: str, x_shape: Sequence[int], w_shape: Sequence[int], group: int
) -> None:
    """X's channels must be W's input channels times `group`, and `group` must divide W's
    output channels."""
    c, m = x_shape[1], w_shape[0]
    if c != w_shape[1] * group or m % group:
        raise InvalidArgument(
            f"{name}: input channels {c} and weight shape {tuple(w_shape)} do not match "
            f"group={group}"
        )


def pool_kernel_shape(node: KernelNode, nd: int) -> list[int]:
    """A pooling node's required `kernel_shape`, checked to have one entry per spatial axis."""
    kernel = node.attr("kernel_shape", None)
    if kernel is None or len(kernel) != nd:
        raise InvalidArgument(f"{node.name}: kernel_shape must have {nd} entries, got {kernel}")
    return [int(k) for k in kernel]


def conv_geometry(
    node: KernelNode,
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    ceil_mode: bool = False,
) -> tuple[list[int], list[int], list[int]]:
    """(pads_begin, pads_end, out_shape) of a sliding-window op over spatial dims `in_shape`.

    SAME_* pads so that out = ceil(in / stride), the odd pixel going at the end (UPPER) or the
    start (LOWER); VALID pads nothing; NOTSET (or empty) uses `pads`; any other `auto_pad`
    raises. ceil_mode drops a last window that would start in the end padding (the ONNX and
    onnxruntime rule).
    """
    nd = len(in_shape)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-i // s) for i, s in zip(in_shape, strides)]
        total = [max(0, (o - 1) * s + e - i) for o, s, e, i in zip(out, strides, eff, in_shape)]
        if auto_pad == "SAME_UPPER":
            pb = [t // 2 for t in total]
        else:
            pb = [t - t // 2 for t in total]
        pe = [t - b for t, b in zip(total, pb)]
        return pb, pe, out
    if auto_pad == "VALID":
        pb = [0] * nd
        pe = [0] * nd
    elif auto_pad in ("NOTSET", "", None):
        pads = list(node.attr("pads", None) or [0] * (2 * nd))
        if len(pads) != 2 * nd:
            raise InvalidArgument(f"{node.name}: pads must have {2 * nd} entries, got {len(pads)}")
        pb, pe = pads[:nd], pads[nd:]
    else:
        raise InvalidArgument(f"{node.name}: unknown auto_pad {auto_pad!r}")
    out = []
    for i, b, e, k, s in zip(in_shape, pb, pe, eff, strides):
        span = i + b + e - k
        if span < 0:  # a window reaching past the padded input, as ceil_mode's last one may
            out.append(_short_input_windows(node, span, s, k, i + b + e))
            continue
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + b:
            o -= 1
        out.append(o)
    return pb, pe, out


def _short_input_windows(node: KernelNode, span: int, stride: int, k: int, padded: int) -> int:
    """Output windows along an axis whose padded input is shorter than the dilated kernel
    (`span` = padded input - kernel < 0).

    Convolutions refuse it, as onnxruntime does. Pools follow onnxruntime, which divides
    `span` by the stride truncating toward zero (in either ceil_mode): one window when the
    shortfall is under the stride, reading past the padded input as ceil_mode's last window
    does (those cells are in no max, sum or AveragePool count, as in onnxruntime's pools from
    opset 19), no window when the shortfall is a stride or more but less than two, and an error
    below that. The ONNX formula (floor) and onnx.reference give no window."""
    if not node.op_type.endswith("Pool"):
        raise InvalidArgument(
            f"{node.name}: kernel (dilated size {k}) larger than padded input ({padded})"
        )
    o = 1 - (-span) // stride
    if o < 0:
        raise InvalidArgument(
            f"{node.name}: kernel (dilated size {k}) larger than padded input ({padded}) by "
            f"{-span}, at least a stride ({stride}): the output size would be negative"
        )
    return o
