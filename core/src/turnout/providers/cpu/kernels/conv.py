"""Convolution kernels: Conv, ConvTranspose, ConvInteger, QLinearConv (1-D, 2-D, 3-D and up).

Conv is im2col + one batched BLAS matmul per call: the padded input is viewed as sliding
windows (no copy until the reshape), grouped channels become a batch axis of the matmul.
ConvTranspose is the adjoint: one matmul to columns, then col2im as a strided add per kernel
offset. The window geometry (pads, output size per auto_pad) is `turnout.sdk.semantics.geometry`,
shared with every provider; `pad_spatial` and `window_slices` here serve the pooling kernels in
`pool.py` too.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.blas_threads import blas_matmul
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.geometry import (
    check_conv_channels,
    conv_geometry,
    conv_kernel_shape,
    spatial_attrs,
)
from turnout.sdk.semantics.quant import code_magnitude, exact_runs
from turnout.sdk.semantics.unfold import conv_transpose_geometry, tap_placements

__all__: list[str] = []


def compute_dtype(dt: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype to do arithmetic in: float32/float64 as is, narrower floats widened to float32."""
    if dt == np.float64:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def pad_spatial(
    x: np.ndarray,
    pb: Sequence[int],
    pe: Sequence[int],
    out: Sequence[int],
    eff: Sequence[int],
    strides: Sequence[int],
    value: Any = 0,
) -> np.ndarray:
    """Pad the spatial axes (2:) of `x` so every one of `out` windows fits (ceil_mode extra)."""
    widths = [(0, 0), (0, 0)]
    need_pad = False
    for i, b, _e, o, k, s in zip(x.shape[2:], pb, pe, out, eff, strides):
        need = (o - 1) * s + k
        end = max(need - i - b, 0)
        widths.append((b, end))
        need_pad = need_pad or b > 0 or end > 0
    if not need_pad:
        return x
    if any(b < 0 for b, _ in widths):
        return np.pad(x, widths, constant_values=value)  # np.pad's error for a negative pad
    # a filled buffer and one copy: np.pad costs ~20 us of Python per call at small sizes
    xp = np.full([d + b + e for d, (b, e) in zip(x.shape, widths)], value, dtype=x.dtype)
    xp[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, widths))] = x
    return xp


def window_slices(
    kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], out: Sequence[int]
) -> list[tuple[Any, ...]]:
    """For each kernel offset, the strided slice of the padded input that it sees."""
    res: list[tuple[Any, ...]] = []
    for offs in itertools.product(*[range(k) for k in kernel]):
        res.append(
            (
                Ellipsis,
                *tuple(
                    slice(o * d, o * d + (n - 1) * s + 1, s)
                    for o, d, n, s in zip(offs, dilations, out, strides)
                ),
            )
        )
    return res


def _im2col(
    xp: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
) -> np.ndarray:
    """View (N, C, *out, *kernel) of the padded input."""
    nd = len(kernel)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    v = sliding_window_view(xp, eff, axis=tuple(range(2, 2 + nd)))
    idx: tuple[slice, ...] = (slice(None), slice(None))
    idx += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides))
    idx += tuple(slice(None, None, d) for d in dilations)
    return v[idx]


def conv_nd(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    pb: Sequence[int],
    pe: Sequence[int],
    out: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    name: str,
) -> np.ndarray:
    """Grouped N-D convolution (no bias) of float arrays, by im2col + batched matmul."""
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = w.shape[2:]
    nd = len(kernel)
    check_conv_channels(name, x.shape, w.shape, group)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    xp = pad_spatial(x, pb, pe, out, eff, strides)
    cols = _im2col(xp, kernel, strides, dilations, out)  # N, C, *out, *k
    p = int(np.prod(out))
    ck = (c // group) * int(np.prod(kernel))
    cols = cols.reshape((n, group, c // group, *tuple(out), *tuple(kernel)))
    perm = (0, 1, *tuple(range(3, 3 + nd)), 2, *tuple(range(3 + nd, 3 + 2 * nd)))
    cols = cols.transpose(perm).reshape(n, group, p, ck)
    wg = w.reshape(group, m // group, ck).transpose(0, 2, 1)
    y = blas_matmul(cols, wg)  # N, G, P, M/G
    return y.transpose(0, 1, 3, 2).reshape((n, m, *tuple(out)))


def _conv_setup(node: KernelNode, x: np.ndarray, w: np.ndarray) -> tuple[Any, ...]:
    kernel = conv_kernel_shape(node, x.shape, w.shape)
    strides, dilations = spatial_attrs(node, x.ndim - 2, kernel)
    pb, pe, out = conv_geometry(node, x.shape[2:], kernel, strides, dilations)
    return strides, dilations, pb, pe, out


ConvFn = Callable[[np.ndarray, np.ndarray, "np.ndarray | None"], np.ndarray]


def _conv_plan(node: KernelNode, group: int, x: np.ndarray, w: np.ndarray) -> tuple[Any, ...]:
    """Everything about one Conv that depends only on attributes and input shapes/dtype.

    Checks what `_conv_setup` and `conv_nd` check (same errors), then lays out the im2col
    view: the (zero-padded) input as (N, G, C/G, *kernel, *out) by strides alone, so that the
    columns are one reshape (copy) of it, made along the output's rows. The layout is None
    where `conv_nd` should run instead (empty input, negative pads).
    """
    strides, dilations, pb, pe, out = _conv_setup(node, x, w)
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = w.shape[2:]
    nd = len(kernel)
    ct = compute_dtype(x.dtype)
    check_conv_channels(node.name, x.shape, w.shape, group)
    if x.size == 0 or any(b < 0 for b in pb):
        return (None, ct, strides, dilations, pb, pe, out)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    ends = [
        max((o - 1) * s + e - i - b, 0) for i, b, o, e, s in zip(x.shape[2:], pb, out, eff, strides)
    ]
    padded = (n, c, *[i + b + e for i, b, e in zip(x.shape[2:], pb, ends)])
    need_pad = any(pb) or any(ends)
    interior = (slice(None), slice(None), *[slice(b, b + i) for i, b in zip(x.shape[2:], pb)])
    elem = [ct.itemsize]  # C-order strides of the padded buffer
    for d in reversed(padded[1:]):
        elem.insert(0, elem[0] * d)
    s_n, s_c, sp = elem[0], elem[1], elem[2:]
    cg = c // group
    view_shape = (n, group, cg, *kernel, *out)
    view_strides = (
        s_n,
        s_c * cg,
        s_c,
        *[a * d for a, d in zip(sp, dilations)],
        *[a * s for a, s in zip(sp, strides)],
    )
    ck = cg * int(np.prod(kernel))
    layout = (
        padded if need_pad else None,
        interior,
        view_shape,
        view_strides,
        (n, group, ck, int(np.prod(out))),
        (group, m // group, ck),
        (n, m, *out),
        (m,),
        (-1,) + (1,) * nd,
    )
    return (layout, ct, strides, dilations, pb, pe, out)


def conv_runner(node: KernelNode, group: int) -> ConvFn:
    """Conv plus bias, in the compute dtype (Conv and FusedConv).

    The geometry is planned once per (X shape, W shape, X dtype) and reused while the shapes
    stay the same, so a run costs one padded copy, one im2col copy and one batched matmul:
    W as (G, M/G, C/G*k) times the columns as (N, G, C/G*k, P), whose product is already
    laid out as (N, M, *out). (`conv_nd` multiplies the transposed pair; BLAS may round the
    two in another order, in the last bit.)
    """
    memo: tuple[Any, Any] = (None, None)
    name = node.name

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        nonlocal memo
        key = (x.shape, w.shape, x.dtype)
        seen, plan = memo
        if seen != key:
            plan = _conv_plan(node, group, x, w)
            memo = (key, plan)
        layout, ct, strides, dilations, pb, pe, out = plan
        if layout is None:
            y = conv_nd(
                x.astype(ct, copy=False), w.astype(ct, copy=False), group, pb, pe, out,
                strides, dilations, name,
            )  # fmt: skip
            m = (w.shape[0],)
            bias_shape = (-1,) + (1,) * (x.ndim - 2)
        else:
            (
                padded,
                interior,
                view_shape,
                view_strides,
                cols_shape,
                w_shape,
                y_shape,
                m,
                bias_shape,
            ) = layout
            if padded is None:
                xp = np.ascontiguousarray(x, dtype=ct)
            else:
                xp = np.zeros(padded, ct)
                xp[interior] = x
            cols_t = np.ndarray(view_shape, ct, xp, 0, view_strides).reshape(cols_shape)
            wg = w.astype(ct, copy=False).reshape(w_shape)
            y = blas_matmul(wg, cols_t).reshape(y_shape)  # (N, G, M/G, P): already (N, M, *out)
        if b is not None:
            if b.shape != m:
                raise InvalidArgument(f"{name}: bias shape {b.shape} must be ({m[0]},)")
            y += b.astype(ct, copy=False).reshape(bias_shape)  # a view: no copy per run
        return y

    return run


@cpu_kernel("Conv", since=1)
def conv(node: KernelNode) -> KernelFn:
    run_conv = conv_runner(node, int(node.attr("group", 1)))

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray]:
        return (run_conv(x, w, b).astype(x.dtype, copy=False),)

    return run


def _zero_point(zp: np.ndarray | None, name: str, what: str) -> np.ndarray:
    if zp is None:
        return np.zeros((), np.int64)
    return np.asarray(zp).astype(np.int64)


def _per_channel(zp: np.ndarray, m: int, nd: int, name: str, what: str) -> np.ndarray:
    """A scalar or per-output-channel (length M) quantization parameter, broadcastable over W."""
    if zp.ndim == 0 or zp.size == 1:
        return zp.reshape(())
    if zp.shape != (m,):
        raise InvalidArgument(
            f"{name}: {what} must be a scalar or have shape ({m},), got {zp.shape}"
        )
    return zp.reshape((m,) + (1,) * (nd + 1))


def _int_conv(
    node: KernelNode, group: int, x: np.ndarray, xz: np.ndarray, w: np.ndarray, wz: np.ndarray
) -> np.ndarray:
    """Exact integer convolution of (x - xz) and (w - wz), as int64: float32 convolutions over
    runs of input channels whose sums cannot pass 2**24 (`semantics.quant.exact_runs`), summed in
    float64; float64 throughout where no such run exists (wider types, or one channel's
    window alone too long)."""
    strides, dilations, pb, pe, out = _conv_setup(node, x, w)
    if xz.ndim and xz.size != 1:
        raise InvalidArgument(f"{node.name}: x_zero_point must be a scalar, got shape {xz.shape}")
    wzc = _per_channel(wz, w.shape[0], w.ndim - 2, node.name, "w_zero_point")
    window = int(np.prod(w.shape[2:], dtype=np.int64))
    runs: list[slice] = []
    if x.dtype.itemsize == 1 and w.dtype.itemsize == 1:
        bound = code_magnitude(x, xz) * code_magnitude(w, wz) * window
        runs = exact_runs(w.shape[1], bound) if bound < 1 << 24 else []
    if not runs or (len(runs) > 1 and group != 1):
        xs = x.astype(np.float64) - float(xz.reshape(()))
        y = conv_nd(
            xs, w.astype(np.float64) - wzc, group, pb, pe, out, strides, dilations, node.name
        )
        return np.rint(y).astype(np.int64)
    xs32 = np.subtract(x, xz.reshape(()), dtype=np.float32)
    if len(runs) == 1:  # the whole convolution, grouped or not
        ws = np.subtract(w, wzc, dtype=np.float32)
        y = conv_nd(xs32, ws, group, pb, pe, out, strides, dilations, node.name)
        return y.astype(np.int64)
    check_conv_channels(node.name, x.shape, w.shape, group)  # runs of both would hide it
    acc: np.ndarray | None = None
    for run in runs:  # runs of input channels (group 1): the sum of their convolutions
        ws = np.subtract(w[:, run], wzc, dtype=np.float32)
        part = conv_nd(xs32[:, run], ws, group, pb, pe, out, strides, dilations, node.name)
        acc = part.astype(np.float64) if acc is None else np.add(acc, part, out=acc)
    assert acc is not None
    return acc.astype(np.int64)


@cpu_kernel("ConvInteger", since=10)
def conv_integer(node: KernelNode) -> KernelFn:
    group = int(node.attr("group", 1))

    def run(
        x: np.ndarray, w: np.ndarray, xz: np.ndarray | None = None, wz: np.ndarray | None = None
    ) -> tuple[np.ndarray]:
        y = _int_conv(
            node, group, x, _zero_point(xz, node.name, "x"), w, _zero_point(wz, node.name, "w")
        )
        return (y.astype(np.int32),)

    return run


@cpu_kernel("QLinearConv", since=10)
def qlinear_conv(node: KernelNode) -> KernelFn:
    group = int(node.attr("group", 1))

    def run(
        x: np.ndarray,
        x_scale: np.ndarray,
        xz: np.ndarray | None,
        w: np.ndarray,
        w_scale: np.ndarray,
        wz: np.ndarray | None,
        y_scale: np.ndarray,
        yz: np.ndarray | None,
        b: np.ndarray | None = None,
    ) -> tuple[np.ndarray]:
        acc = _int_conv(
            node, group, x, _zero_point(xz, node.name, "x"), w, _zero_point(wz, node.name, "w")
        )
        m = w.shape[0]
        nd = x.ndim - 2
        if b is not None:
            if b.shape != (m,):
                raise InvalidArgument(f"{node.name}: B shape {b.shape} must be ({m},)")
            acc = acc + b.astype(np.int64).reshape((m,) + (1,) * nd)
        ws = np.asarray(w_scale, np.float64)
        ws = ws.reshape(()) if ws.size == 1 else _per_channel(ws, m, nd - 1, node.name, "w_scale")
        scale = float(np.asarray(x_scale).reshape(())) * ws / float(np.asarray(y_scale).reshape(()))
        out_dt = yz.dtype if yz is not None else x.dtype
        info = np.iinfo(out_dt)
        zp = 0 if yz is None else int(np.asarray(yz).reshape(()))
        y = np.rint(acc * np.float32(scale).astype(np.float64)) + zp
        return (np.clip(y, info.min, info.max).astype(out_dt),)

    return run


# --------------------------------------------------------------------------------------------
# ConvTranspose


@cpu_kernel("ConvTranspose", since=1)
def conv_transpose(node: KernelNode) -> KernelFn:
    group = int(node.attr("group", 1))

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray]:
        geo = conv_transpose_geometry(node, x.shape, w.shape, group, None if b is None else b.shape)
        n, c = x.shape[:2]
        nd = x.ndim - 2
        ct = compute_dtype(x.dtype)
        mg = w.shape[1]
        k = int(np.prod(geo.kernel))
        ins = x.shape[2:]
        p = int(np.prod(ins))
        xg = x.astype(ct, copy=False).reshape(n, group, c // group, p)
        wg = w.astype(ct, copy=False).reshape(group, c // group, mg * k).transpose(0, 2, 1)
        cols = blas_matmul(wg, xg).reshape((n, group * mg, k, *tuple(ins)))  # N, M, K, *in
        # Add each kernel tap's columns into the output, with pads cropped (or zero-extended).
        y = np.zeros((n, group * mg, *tuple(geo.out)), ct)
        where = tap_placements(geo.kernel, geo.strides, geo.dilations, geo.pads_begin, ins, geo.out)
        for _, src, dst in where:
            y[dst] += cols[src]
        if b is not None:
            y += b.astype(ct).reshape((-1,) + (1,) * nd)
        return (y.astype(x.dtype, copy=False),)

    return run
