"""Geometry of the ops that fold columns back into an image: ConvTranspose and Col2Im.

Both compute per-kernel-tap columns and add each tap's columns into the output at a stride; the
output size (output_shape, output_padding, auto_pad, pads), the shape checks and where each
tap's columns land (`tap_placements`) are decided here, so every provider folds the same way and
rejects the same malformed node with the same `InvalidArgument`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import attr_text
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics.geometry import pool_kernel_shape, spatial_attrs

__all__ = [
    "Col2ImGeometry",
    "ConvTransposeGeometry",
    "TapPlacement",
    "col2im_geometry",
    "conv_transpose_geometry",
    "max_unpool_shapes",
    "tap_placements",
]


class ConvTransposeGeometry(NamedTuple):
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    pads_begin: list[int]
    out: list[int]


class Col2ImGeometry(NamedTuple):
    channels: int
    kernel: list[int]  # block_shape
    blocks: list[int]  # blocks along each axis of the padded image
    strides: list[int]
    dilations: list[int]
    pads_begin: list[int]
    padded: list[int]  # the image plus its pads
    image: list[int]


class TapPlacement(NamedTuple):
    """Kernel tap `tap`'s columns, `src` of the (N, C, taps, *blocks) columns, add into `dst` of
    the (N, C, *out) output (strided slices, each position once)."""

    tap: int
    src: tuple[Any, ...]
    dst: tuple[Any, ...]


def _auto_pad(node: KernelNode) -> str:
    return attr_text(node.attr("auto_pad"), "NOTSET")


def conv_transpose_geometry(
    node: KernelNode,
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    group: int,
    b_shape: Sequence[int] | None = None,
) -> ConvTransposeGeometry:
    """Check X (N, C, *in), W (C, M/group, *kernel) and B (M,), and place the output: its size
    from output_shape (a larger one extends the end, as onnxruntime does), SAME_* auto_pad, or
    pads with output_padding."""
    if len(x_shape) < 3 or len(w_shape) != len(x_shape):
        raise InvalidArgument(
            f"{node.name}: X {tuple(x_shape)} and W {tuple(w_shape)} must be N-D with N >= 3"
        )
    c = x_shape[1]
    if w_shape[0] != c or c % group:
        raise InvalidArgument(
            f"{node.name}: W {tuple(w_shape)} does not match {c} input channels, group={group}"
        )
    m = group * w_shape[1]
    if b_shape is not None and tuple(b_shape) != (m,):
        raise InvalidArgument(f"{node.name}: bias shape {tuple(b_shape)} must be ({m},)")
    nd = len(x_shape) - 2
    kernel = list(node.attr("kernel_shape", None) or w_shape[2:])
    if tuple(kernel) != tuple(w_shape[2:]):
        raise InvalidArgument(
            f"{node.name}: kernel_shape {kernel} does not match W {tuple(w_shape)}"
        )
    strides, dilations = spatial_attrs(node, nd, kernel)
    opad = list(node.attr("output_padding", None) or [0] * nd)[:nd]
    if len(opad) != nd:
        raise InvalidArgument(f"{node.name}: output_padding must have {nd} entries")
    auto_pad = _auto_pad(node)
    output_shape = node.attr("output_shape", None)
    pads_attr = node.attr("pads", None)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    ins = x_shape[2:]
    full = [s * (i - 1) + op + e for s, i, op, e in zip(strides, ins, opad, eff)]
    if output_shape is not None or (pads_attr is None and auto_pad in ("SAME_UPPER", "SAME_LOWER")):
        if output_shape is not None:
            out = list(output_shape)[-nd:]
        else:
            out = [i * s for i, s in zip(ins, strides)]
        total = [max(f - o, 0) for f, o in zip(full, out)]
        if auto_pad == "SAME_UPPER":
            pb = [t // 2 for t in total]
        else:
            pb = [t - t // 2 for t in total]
    else:
        pads = list(pads_attr or [0] * (2 * nd))
        if auto_pad == "VALID":
            pads = [0] * (2 * nd)
        if len(pads) != 2 * nd:
            raise InvalidArgument(f"{node.name}: pads must have {2 * nd} entries")
        pb = pads[:nd]
        out = [f - b - e for f, b, e in zip(full, pb, pads[nd:])]
    if any(o <= 0 for o in out):
        raise InvalidArgument(f"{node.name}: computed output shape {out} is not positive")
    return ConvTransposeGeometry(kernel, strides, dilations, pb, out)


def col2im_geometry(
    node: KernelNode, x_shape: Sequence[int], image_shape: Any, block_shape: Any
) -> Col2ImGeometry:
    """Check Col2Im's input (N, C * prod(block), L) against the image and block shapes (host
    values) and the attributes, and say how its L blocks tile the padded image."""
    img = [int(v) for v in image_shape.reshape(-1)]
    blk = [int(v) for v in block_shape.reshape(-1)]
    nd = len(img)
    if len(blk) != nd or len(x_shape) != 3:
        raise InvalidArgument(f"{node.name}: input must be 3-D and image/block shapes equal length")
    strides = list(node.attr("strides", None) or [1] * nd)
    dil = list(node.attr("dilations", None) or [1] * nd)
    pads = list(node.attr("pads", None) or [0] * (2 * nd))
    k = math.prod(blk)
    _, ck, length = x_shape
    if ck % k:
        raise InvalidArgument(f"{node.name}: input dim 1 ({ck}) not divisible by block size {k}")
    padded = [i + pads[a] + pads[a + nd] for a, i in enumerate(img)]
    nb = [(p - ((b - 1) * d + 1)) // s + 1 for p, b, d, s in zip(padded, blk, dil, strides)]
    if math.prod(nb) != length or any(v <= 0 for v in nb):
        raise InvalidArgument(
            f"{node.name}: {length} blocks does not match the image geometry {nb}"
        )
    return Col2ImGeometry(ck // k, blk, nb, strides, dil, pads[:nd], padded, img)


def tap_placements(
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads_begin: Sequence[int],
    blocks: Sequence[int],
    out: Sequence[int],
) -> list[TapPlacement]:
    """Where each kernel tap's columns land: block j of tap offset o sits at output position
    o * dilation + j * stride - pad; blocks that fall outside the output are cropped (taps
    with none inside are left out)."""
    placements = []
    for t, offs in enumerate(itertools.product(*(range(k) for k in kernel))):
        src: list[slice] = []
        dst: list[slice] = []
        for o, d, s, m, p, size in zip(offs, dilations, strides, blocks, pads_begin, out):
            start = o * d - p
            first = -(start // s) if start < 0 else 0  # the first block at position >= 0
            last = min(m, (size - 1 - start) // s + 1) if size - 1 >= start else 0
            if last <= first:
                break
            src.append(slice(first, last))
            dst.append(slice(start + first * s, start + (last - 1) * s + 1, s))
        else:
            every = (slice(None), slice(None))
            placements.append(TapPlacement(t, (*every, t, *src), (*every, *dst)))
    return placements


def max_unpool_shapes(
    node: KernelNode, x_shape: Sequence[int], idx_shape: Sequence[int], output_shape: Any
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """MaxUnpool's (unpooled, output) shapes: indices address the unpooled shape inferred from
    kernel, strides and pads; an explicit `output_shape` (a host value, or None) no smaller
    extends it with zeros at the end of each axis."""
    if len(x_shape) < 3 or tuple(idx_shape) != tuple(x_shape):
        raise InvalidArgument(
            f"{node.name}: X {tuple(x_shape)} and I {tuple(idx_shape)} must match and be >= 3-D"
        )
    nd = len(x_shape) - 2
    kernel = pool_kernel_shape(node, nd)
    strides = list(node.attr("strides", None) or [1] * nd)
    pads = list(node.attr("pads", None) or [0] * (2 * nd))
    inferred = tuple(x_shape[:2]) + tuple(
        (i - 1) * s + k - pads[a] - pads[a + nd]
        for a, (i, s, k) in enumerate(zip(x_shape[2:], strides, kernel))
    )
    if output_shape is None:
        return inferred, inferred
    shape = tuple(int(v) for v in output_shape.reshape(-1))
    if len(shape) != len(x_shape) or any(s < i for s, i in zip(shape, inferred)):
        raise InvalidArgument(
            f"{node.name}: output_shape {shape} smaller than the unpooled shape {inferred}"
        )
    return inferred, shape
