"""numpy kernels of the com.microsoft.nchwc ops: each unblocks its input
(`turnout.graph.contrib.nchwc_layout`), runs the plain kernel (Conv, the pools, Resize's taps) and
blocks the result again, so the values between them keep onnxruntime's memory layout.

nchwc Conv is a Conv with its filter (and bias) padded to whole blocks of output channels, an
optional `Sum` added before the fused activation (the residual Add onnxruntime folds in), and
a plain NCHW input when the input has fewer channels than a block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from turnout.graph.contrib.nchwc_layout import (
    DOMAIN,
    block_size,
    from_blocked,
    to_blocked,
    unblock_filter,
)
from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.conv import conv_runner
from turnout.providers.cpu.kernels.pool import (
    average_pool,
    global_average_pool,
    global_max_pool,
    max_pool,
)
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.activations import activation, activation_of
from turnout.sdk.semantics.resize import filter_taps, source_coordinates

__all__: list[str] = []

Array = np.ndarray[Any, Any]


def _blocked_input(node: KernelNode, x: Array, block: int) -> Array:
    """Check that `x` is a 4-D NCHWc value of whole blocks (else the model was saved for
    another block size, or is not onnxruntime's)."""
    if x.ndim != 4 or x.shape[1] % block:
        raise InvalidArgument(
            f"{node.name}: {DOMAIN}::{node.op_type} input of shape {x.shape} is not NCHWc "
            f"with blocks of {block} channels (this machine's block size; a model optimized "
            "by onnxruntime on another machine may use another)"
        )
    return from_blocked(x, block)


@cpu_kernel("ReorderInput", since=1, domain=DOMAIN)
def reorder_input(node: KernelNode) -> KernelFn:
    last = bool(node.attr("channels_last", 0))
    block = block_size()

    def run(x: Array) -> tuple[Array]:
        if x.ndim != 4:
            raise InvalidArgument(f"{node.name}: ReorderInput needs a 4-D input, got {x.shape}")
        return (to_blocked(np.moveaxis(x, -1, 1) if last else x, block),)

    return run


@cpu_kernel("ReorderOutput", since=1, domain=DOMAIN)
def reorder_output(node: KernelNode) -> KernelFn:
    last = bool(node.attr("channels_last", 0))
    channels = int(node.attr("channels", 0))
    block = block_size()

    def run(x: Array) -> tuple[Array]:
        plain = _blocked_input(node, x, block)
        if not 0 < channels <= x.shape[1] < channels + block:
            raise InvalidArgument(
                f"{node.name}: ReorderOutput of {channels} channels from a value of "
                f"{x.shape[1]}: not that count padded to blocks of {block}"
            )
        y = plain[:, :channels]
        return (np.ascontiguousarray(np.moveaxis(y, 1, -1) if last else y),)

    return run


@cpu_kernel("Conv", since=1, domain=DOMAIN)
def conv(node: KernelNode) -> KernelFn:
    """Blocked Conv + bias (+ Sum), then the fused activation, blocked again."""
    group = int(node.attr("group", 1))
    run_conv = conv_runner(node, group)
    act = activation(*activation_of(node), owned=True)
    block = block_size()
    unblocked: tuple[Array | None, Array | None] = (None, None)  # a read-only W, unblocked

    def filter_of(w: Array, blocked_input: bool) -> Array:
        nonlocal unblocked
        if unblocked[0] is w and not w.flags.writeable:
            return unblocked[1]  # type: ignore[return-value]
        wp = unblock_filter(w, block, blocked_input)
        unblocked = (w, wp)
        return wp

    def run(x: Array, w: Array, b: Array | None = None, s: Array | None = None) -> tuple[Array]:
        if x.ndim != 4 or w.ndim != 4:
            raise InvalidArgument(
                f"{node.name}: nchwc Conv is 2-D only, got X {x.shape} and W {w.shape}"
            )
        plain_input = x.shape[1] < block  # a network's first Conv reads NCHW directly
        xp = x if plain_input else _blocked_input(node, x, block)
        if w.shape[0] % block:
            raise InvalidArgument(
                f"{node.name}: filter {w.shape} is not whole blocks of {block} output channels"
            )
        depthwise = group > 1 and w.shape[1] == 1
        y = run_conv(xp, filter_of(w, not (plain_input or depthwise)), b)
        if s is not None:
            y += _blocked_input(node, s, block)
        return (to_blocked(np.asarray(act(y)).astype(np.float32, copy=False), block),)

    return run


def _blocked_op(node: KernelNode, plain: KernelFn) -> KernelFn:
    block = block_size()

    def run(x: Array) -> tuple[Array]:
        (y,) = plain(_blocked_input(node, x, block))
        return (to_blocked(y, block),)

    return run


def _blocked_pool(plain: Callable[[KernelNode], KernelFn]) -> Callable[[KernelNode], KernelFn]:
    """The nchwc form of a plain pool kernel (same attributes, channels are independent)."""
    return lambda node: _blocked_op(node, plain(node))


for _op, _plain in (
    ("MaxPool", max_pool),
    ("AveragePool", average_pool),
    ("GlobalAveragePool", global_average_pool),
    ("GlobalMaxPool", global_max_pool),
):
    cpu_kernel(_op, since=1, domain=DOMAIN)(_blocked_pool(_plain))


def _linear_axis(mode: str, out_len: int, in_len: int, scale: int) -> tuple[Array, Array]:
    """Two source indices and weights per output position, as onnxruntime's NCHWc Upsample
    places them: identity at scale 1 (whatever the coordinate mode), and a coordinate before
    the first pixel reads the first pixel (the taps clamp to the edge)."""
    if scale == 1:
        src = np.arange(out_len, dtype=np.float64)
    else:
        src = source_coordinates(mode, out_len, in_len, float(scale))
    return filter_taps(src, in_len, "linear", float(scale))


@cpu_kernel("Upsample", since=1, domain=DOMAIN)
def upsample(node: KernelNode) -> KernelFn:
    """Integer-scale nearest (each pixel repeated) or bilinear upsampling of H and W."""
    scales = [int(s) for s in node.attr("scales", []) or []]
    mode = str(node.attr("mode", "nearest"))
    coords = str(node.attr("coordinate_transformation_mode", "asymmetric"))
    if len(scales) != 4 or scales[:2] != [1, 1] or min(scales) < 1:
        raise InvalidArgument(f"{node.name}: nchwc Upsample scales {scales} must be [1, 1, h, w]")
    if mode not in ("nearest", "linear"):
        raise InvalidArgument(f"{node.name}: nchwc Upsample mode {mode!r}")
    sh, sw = scales[2], scales[3]

    def plain(x: Array) -> tuple[Array]:
        if mode == "nearest":
            return (np.repeat(np.repeat(x, sh, axis=2), sw, axis=3),)
        h, w = x.shape[2:]
        ih, wh = _linear_axis(coords, h * sh, h, sh)
        iw, ww = _linear_axis(coords, w * sw, w, sw)
        rows = np.einsum("nchtw,ht->nchw", x[:, :, ih], wh.astype(np.float32))
        y = np.einsum("nchwt,wt->nchw", rows[:, :, :, iw], ww.astype(np.float32))
        return (y.astype(x.dtype, copy=False),)

    return _blocked_op(node, plain)
