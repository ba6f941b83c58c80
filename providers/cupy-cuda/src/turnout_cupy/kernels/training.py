"""The ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum) on `be.xp`.

Grouping, attributes and the per-step scalars (the learning rate after decay or bias
correction, Momentum's gradient weight) are `turnout.sdk.semantics.optimizers`'s: R and T are
host inputs, read once per run; each optimized tensor's update is a few elementwise xp ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.optimizers import optimizer_attrs, optimizer_groups

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []

DOMAIN = "ai.onnx.preview.training"


def _scalar(v: Any) -> Any:
    return np.asarray(v).reshape(-1)[0]


def _build(kn: KernelNode, be: Backend) -> KernelFn:
    xp = be.xp
    a = optimizer_attrs(kn)

    def run(*inputs: Any) -> tuple[Any, ...]:
        xs, gs, *states = optimizer_groups(kn.name, a.op, list(inputs))
        r, t = float(_scalar(inputs[0])), int(_scalar(inputs[1]))
        rate = a.rate(r, t)
        outs: list[list[Any]] = [[] for _ in range(1 + len(states))]
        for i, (x, g) in enumerate(zip(xs, gs, strict=True)):
            g = a["norm_coefficient"] * x + g  # the regularization term's gradient
            new: tuple[Any, ...]
            if a.op == "Adagrad":
                h = states[0][i] + g * g
                new = (x - rate * g / (xp.sqrt(h) + a["epsilon"]), h)
            elif a.op == "Adam":
                v = a["alpha"] * states[0][i] + (1 - a["alpha"]) * g
                h = a["beta"] * states[1][i] + (1 - a["beta"]) * (g * g)
                y = x - rate * (v / (xp.sqrt(h) + a["epsilon"]))
                new = ((1 - a["norm_coefficient_post"]) * y, v, h)
            else:
                v = a["alpha"] * states[0][i] + a.gradient_weight(t) * g
                step = g + a["alpha"] * v if a.nesterov else v
                new = (x - rate * step, v)
            for out, value, like in zip(outs, new, (x, *(s[i] for s in states)), strict=True):
                out.append(value.astype(like.dtype, copy=False))
        return tuple(v for group in outs for v in group)

    return run


for _op in ("Adagrad", "Adam", "Momentum"):
    cuda_kernel(_op, 1, domain=DOMAIN, applies=float_only, host_inputs=(0, 1))(_build)
