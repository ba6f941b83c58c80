"""Normalizations on `be.xp`: Layer, RMS, Batch (inference), Instance and Group.

Statistics are computed in float32 at least (`stash_type` 1, the default, and what float16
inputs need) and the result is cast back to the input's type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics import shape as shape_sem
from turnout.sdk.semantics.batch_norm import batch_norm_training

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []


def _stash(x: Any) -> Any:
    return x if x.dtype.itemsize >= 4 else x.astype(np.float32)


@cuda_kernel("LayerNormalization", 17, applies=float_only)
def layer_norm(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    axis, eps = int(kn.attr("axis", -1)), float(kn.attr("epsilon", 1e-5))
    n_out = len(kn.node.outputs)  # Mean and InvStdDev are optional

    def run(x: Any, scale: Any, bias: Any = None) -> tuple[Any, ...]:
        axes = tuple(range(shape_sem.norm_axis(kn, axis, x.ndim), x.ndim))
        xs = _stash(x)
        mean = xp.mean(xs, axis=axes, keepdims=True)
        d = xs - mean
        inv = 1 / xp.sqrt(xp.mean(d * d, axis=axes, keepdims=True) + eps)
        y = d * inv * scale
        if bias is not None:
            y = y + bias
        return (y.astype(x.dtype), mean.astype(np.float32), inv.astype(np.float32))[:n_out]

    return run


@cuda_kernel("RMSNormalization", 23, applies=float_only)
def rms_norm(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    axis, eps = int(kn.attr("axis", -1)), float(kn.attr("epsilon", 1e-5))

    def run(x: Any, scale: Any) -> tuple[Any]:
        axes = tuple(range(shape_sem.norm_axis(kn, axis, x.ndim), x.ndim))
        xs = _stash(x)
        inv = 1 / xp.sqrt(xp.mean(xs * xs, axis=axes, keepdims=True) + eps)
        return ((xs * inv * scale).astype(x.dtype),)

    return run


def _channel_view(v: Any, ndim: int) -> Any:
    return v.reshape((1, -1) + (1,) * (ndim - 2))


@cuda_kernel("BatchNormalization", 9, applies=float_only)
def batch_norm(kn: KernelNode, be: Backend) -> KernelFn:
    """Inference: the given statistics. Training (`batch_norm_training`): the batch's mean and
    population variance over all axes but the channels, the running statistics moved towards
    them by `momentum`, and (opsets 9-13) the saved batch statistics."""
    xp = be.xp
    eps = float(kn.attr("epsilon", 1e-5))
    momentum = float(kn.attr("momentum", 0.9))
    training = batch_norm_training(kn)
    n_out = len(kn.node.outputs)

    def run(x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> tuple[Any, ...]:
        if not training:
            inv = scale / xp.sqrt(_stash(var) + eps)
            shift = bias - mean * inv
            y = x * _channel_view(inv, x.ndim) + _channel_view(shift, x.ndim)
            return (y.astype(x.dtype),) + (None,) * (n_out - 1)
        axes = (0, *range(2, x.ndim))
        xs = _stash(x)
        bm = xp.mean(xs, axis=axes)
        d = xs - _channel_view(bm, x.ndim)
        bv = xp.mean(d * d, axis=axes)
        a = _stash(scale) / xp.sqrt(bv + eps)
        y = d * _channel_view(a, x.ndim) + _channel_view(_stash(bias), x.ndim)
        stats = (
            _stash(mean) * momentum + bm * (1 - momentum),
            _stash(var) * momentum + bv * (1 - momentum),
            bm,
            bv,
        )
        return (y.astype(x.dtype), *(s.astype(mean.dtype) for s in stats[: n_out - 1]))

    return run


@cuda_kernel("InstanceNormalization", 6, applies=float_only)
def instance_norm(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    eps = float(kn.attr("epsilon", 1e-5))

    def run(x: Any, scale: Any, bias: Any) -> tuple[Any]:
        axes = tuple(range(2, x.ndim))
        xs = _stash(x)
        mean = xp.mean(xs, axis=axes, keepdims=True)
        var = xp.var(xs, axis=axes, keepdims=True)
        y = (xs - mean) / xp.sqrt(var + eps)
        y = y * _channel_view(scale, x.ndim) + _channel_view(bias, x.ndim)
        return (y.astype(x.dtype),)

    return run


def _group_norm(per_channel: bool) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        groups, eps = int(kn.attr("num_groups")), float(kn.attr("epsilon", 1e-5))

        def run(x: Any, scale: Any, bias: Any) -> tuple[Any]:
            n, c = x.shape[0], x.shape[1]
            xs = _stash(x).reshape(n, groups, -1)
            mean = xp.mean(xs, axis=2, keepdims=True)
            var = xp.var(xs, axis=2, keepdims=True)
            y = ((xs - mean) / xp.sqrt(var + eps)).reshape(x.shape)
            if not per_channel:  # opset 18: scale and bias per group
                scale = xp.repeat(scale, c // groups)
                bias = xp.repeat(bias, c // groups)
            y = y * _channel_view(scale, x.ndim) + _channel_view(bias, x.ndim)
            return (y.astype(x.dtype),)

        return run

    return build


cuda_kernel("GroupNormalization", 18, until=20, applies=float_only)(_group_norm(False))
cuda_kernel("GroupNormalization", 21, applies=float_only)(_group_norm(True))
