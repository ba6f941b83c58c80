"""Normalization kernels: BatchNormalization, LayerNormalization, InstanceNormalization,
GroupNormalization, RMSNormalization, MeanVarianceNormalization, LpNormalization, LRN.

Statistics are computed in float32 (float64 for float64 inputs), as stash_type=1 asks, and the
result is cast back to the input's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.kernels.conv import compute_dtype
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.batch_norm import batch_norm_training
from turnout.sdk.semantics.normalization import MVN_EPSILON, lp_norm_attrs, lrn_window, mvn_axes
from turnout.sdk.semantics.shape import norm_axis

__all__: list[str] = []


def _stash_dtype(node: KernelNode, x: np.ndarray) -> np.dtype[Any]:
    if int(node.attr("stash_type", 1)) != 1 or x.dtype == np.float64:
        return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    return np.dtype(np.float32)


def _channel_param(
    p: np.ndarray, x: np.ndarray, name: str, what: str, per_element: bool = False
) -> np.ndarray:
    """A per-channel (C,) parameter shaped to broadcast over (N, C, ...); (C, D1, ...) as is
    where `per_element` (spatial=0 in BatchNormalization < 9). onnxruntime refuses any other
    shape with InvalidArgument."""
    c = x.shape[1]
    if p.shape == (c,):
        return p.reshape((c,) + (1,) * (x.ndim - 2))
    if per_element and p.shape == x.shape[1:]:
        return p
    raise InvalidArgument(f"{name}: {what} has shape {p.shape}, expected ({c},)")


@cpu_kernel("BatchNormalization", since=1)
def batch_normalization(node: KernelNode) -> KernelFn:
    eps = float(node.attr("epsilon", 1e-5))
    momentum = float(node.attr("momentum", 0.9))
    n_out = len(node.node.outputs)
    training = batch_norm_training(node)
    per_element = node.since_version < 9 and not node.attr("spatial", 1)

    def run(
        x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray
    ) -> tuple[Any, ...]:
        if x.ndim < 2:
            raise InvalidArgument(f"{node.name}: input must be at least 2-D, got {x.shape}")
        ct = compute_dtype(x.dtype)
        xf = x.astype(ct, copy=False)
        p = [
            _channel_param(np.asarray(v).astype(ct), x, node.name, w, per_element)
            for v, w in ((scale, "scale"), (bias, "B"), (mean, "mean"), (var, "var"))
        ]
        if training:
            axes = (0, *tuple(range(2, x.ndim)))
            bm = xf.mean(axis=axes, keepdims=True)
            bv = ((xf - bm) ** 2).mean(axis=axes, keepdims=True)
            run_mean = p[2] * ct.type(momentum) + bm.reshape(p[2].shape) * ct.type(1 - momentum)
            run_var = p[3] * ct.type(momentum) + bv.reshape(p[3].shape) * ct.type(1 - momentum)
            a = p[0] / np.sqrt(bv[0] + ct.type(eps))
            y = (xf - bm) * a + p[1]
            outs: list[Any] = [y.astype(x.dtype, copy=False)]
            extra = [
                run_mean.reshape(mean.shape),
                run_var.reshape(var.shape),
                bm.reshape(mean.shape),
                bv.reshape(var.shape),
            ]
            outs += [e.astype(mean.dtype, copy=False) for e in extra[: n_out - 1]]
            return tuple(outs)
        # onnxruntime's order, to the bit: 1 / sqrt(var + eps), times scale (a quantized model
        # rounds Y to uint8 next, and a last-bit difference there flips codes)
        a = (ct.type(1) / np.sqrt(p[3] + ct.type(eps))) * p[0]
        y = xf * a + (p[1] - p[2] * a)
        return (y.astype(x.dtype, copy=False),) + (None,) * (n_out - 1)

    return run


def _moments(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(axis=axes, keepdims=True)
    d = x - mean
    return mean, (d * d).mean(axis=axes, keepdims=True)


def _axis(node: KernelNode, x: np.ndarray, default: int = -1) -> int:
    return norm_axis(node, int(node.attr("axis", default)), x.ndim, scalar=True)


@cpu_kernel("LayerNormalization", since=17)
def layer_normalization(node: KernelNode) -> KernelFn:
    eps = float(node.attr("epsilon", 1e-5))
    n_out = len(node.node.outputs)
    stat_info = [node.outputs[i] if i < len(node.outputs) else None for i in (1, 2)]

    def run(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None) -> tuple[Any, ...]:
        axis = _axis(node, x)
        ct = _stash_dtype(node, x)
        xf = x.astype(ct, copy=False)
        axes = tuple(range(axis, x.ndim))
        mean, var = _moments(xf, axes)
        inv = 1 / np.sqrt(var + ct.type(eps))
        try:
            y = (xf - mean) * inv * scale.astype(ct, copy=False)
            if bias is not None:
                y = y + bias.astype(ct, copy=False)
            y = np.broadcast_to(y, x.shape)
        except ValueError:
            raise InvalidArgument(
                f"{node.name}: scale/B shapes do not broadcast to {x.shape[axis:]}"
            ) from None
        outs: list[Any] = [y.astype(x.dtype)]
        for info, v in zip(stat_info, (mean, inv)):
            dt = info.dtype if info is not None and info.dtype is not None else np.dtype(np.float32)
            outs.append(v.astype(dt))
        return tuple(outs[:n_out])

    return run


@cpu_kernel("RMSNormalization", since=23)
def rms_normalization(node: KernelNode) -> KernelFn:
    eps = float(node.attr("epsilon", 1e-5))

    def run(x: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray]:
        axis = _axis(node, x)
        ct = _stash_dtype(node, x)
        xf = x.astype(ct, copy=False)
        ms = (xf * xf).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
        try:
            y = np.broadcast_to(
                xf / np.sqrt(ms + ct.type(eps)) * scale.astype(ct, copy=False), x.shape
            )
        except ValueError:
            raise InvalidArgument(
                f"{node.name}: scale shape {scale.shape} does not broadcast to {x.shape[axis:]}"
            ) from None
        return (y.astype(x.dtype),)

    return run


@cpu_kernel("InstanceNormalization", since=1)
def instance_normalization(node: KernelNode) -> KernelFn:
    eps = float(node.attr("epsilon", 1e-5))

    def run(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim < 3:
            raise InvalidArgument(f"{node.name}: input must be at least 3-D, got {x.shape}")
        ct = compute_dtype(x.dtype)
        xf = x.astype(ct, copy=False)
        mean, var = _moments(xf, tuple(range(2, x.ndim)))
        s = _channel_param(scale.astype(ct), x, node.name, "scale")
        b = _channel_param(bias.astype(ct), x, node.name, "B")
        return (((xf - mean) / np.sqrt(var + ct.type(eps)) * s + b).astype(x.dtype),)

    return run


@cpu_kernel("GroupNormalization", since=18)
def group_normalization(node: KernelNode) -> KernelFn:
    eps = float(node.attr("epsilon", 1e-5))
    groups = int(node.attr("num_groups"))
    per_channel = node.since_version >= 21

    def run(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray]:
        if x.ndim < 2:
            raise InvalidArgument(f"{node.name}: input must be at least 2-D, got {x.shape}")
        n, c = x.shape[:2]
        if groups <= 0 or c % groups:
            raise InvalidArgument(
                f"{node.name}: {c} channels not divisible into num_groups={groups}"
            )
        want = c if per_channel else groups
        if scale.shape != (want,) or bias.shape != (want,):
            raise InvalidArgument(f"{node.name}: scale and bias must have shape ({want},)")
        ct = _stash_dtype(node, x)
        xg = x.astype(ct, copy=False).reshape(n, groups, -1)
        mean, var = _moments(xg, (2,))
        y = ((xg - mean) / np.sqrt(var + ct.type(eps))).reshape(x.shape)
        s, b = scale.astype(ct), bias.astype(ct)
        if not per_channel:
            s, b = np.repeat(s, c // groups), np.repeat(b, c // groups)
        bshape = (c,) + (1,) * (x.ndim - 2)
        return ((y * s.reshape(bshape) + b.reshape(bshape)).astype(x.dtype),)

    return run


@cpu_kernel("MeanVarianceNormalization", since=9)
def mean_variance_normalization(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray]:
        axes = mvn_axes(node, x.ndim)
        ct = compute_dtype(x.dtype)
        xf = x.astype(ct, copy=False)
        mean = xf.mean(axis=axes, keepdims=True)
        var = (xf * xf).mean(axis=axes, keepdims=True) - mean * mean
        return (((xf - mean) / (np.sqrt(var) + ct.type(MVN_EPSILON))).astype(x.dtype),)

    return run


@cpu_kernel("LpNormalization", since=1)
def lp_normalization(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray]:
        p, axis = lp_norm_attrs(node, x.ndim)
        ct = compute_dtype(x.dtype)
        xf = x.astype(ct, copy=False)
        if p == 1:
            norm = np.abs(xf).sum(axis=axis, keepdims=True)
        else:
            norm = np.sqrt((xf * xf).sum(axis=axis, keepdims=True))
        y = np.where(norm == 0, ct.type(0), xf / np.where(norm == 0, ct.type(1), norm))
        return (y.astype(x.dtype),)

    return run


@cpu_kernel("LRN", since=1)
def lrn(node: KernelNode) -> KernelFn:
    def run(x: np.ndarray) -> tuple[np.ndarray]:
        size, lo, hi, alpha, beta, bias = lrn_window(node, x.ndim)
        ct = compute_dtype(x.dtype)
        xf = x.astype(ct, copy=False)
        sq = np.pad(xf * xf, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
        c = x.shape[1]
        window = sq[:, 0:c].copy()
        for k in range(1, size):
            window += sq[:, k : k + c]
        y = xf / (ct.type(bias) + ct.type(alpha / size) * window) ** ct.type(beta)
        return (y.astype(x.dtype),)

    return run
