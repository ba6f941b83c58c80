"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on `be.xp`.

The input is viewed as (N, C, D) and the target as (N, D). SoftmaxCrossEntropyLoss first takes
a stable log-softmax over C (x - max - log(sum(exp(x - max))), as onnxruntime does). Targets
equal to `ignore_index` weigh 0; a target in [-C, 0) counts from the end; any other target
outside [0, C) is flagged on the device and the run raises `InvalidArgument` naming the node
and the target input (read with a clamped index meanwhile). "mean" with a weight input or an
`ignore_index` divides by the sum of the gathered weights. Shapes are checked by
`turnout.sdk.semantics.check_loss_shapes`, as on every provider. float16 computes in float32 and
rounds once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.loss import check_loss_shapes, weigh_and_reduce

from ..backend import Backend
from .registry import cuda_kernel, float_only

__all__: list[str] = []

_REDUCTIONS = ("none", "sum", "mean")


def _applies(kn: KernelNode) -> str | None:
    red = kn.attr("reduction", "mean")
    if red not in _REDUCTIONS:
        return f"reduction {red!r} is not one of {_REDUCTIONS}"
    return float_only(kn)


def _loss(softmax: bool) -> Any:
    def build(kn: KernelNode, be: Backend) -> KernelFn:
        xp = be.xp
        red = kn.attr("reduction", "mean")
        ignore = kn.attr("ignore_index", None)
        outs = kn.node.outputs
        want_logp = softmax and len(outs) > 1 and bool(outs[1])
        target_name = kn.inputs[1].name if kn.inputs[1] is not None else "target"

        def run(x: Any, target: Any, weight: Any = None) -> tuple[Any, ...]:
            check_loss_shapes(f"{kn.op_type} node {kn.name!r}", x, target, weight)
            n, c = x.shape[0], x.shape[1]
            ct = np.promote_types(x.dtype, np.float32)
            x3 = x.astype(ct, copy=False).reshape(n, c, -1)
            t2 = target.astype(np.int64, copy=False).reshape(n, -1)
            logp = x3
            if softmax and x3.size:
                s = x3 - xp.max(x3, axis=1, keepdims=True)
                logp = s - xp.log(xp.sum(xp.exp(s), axis=1, keepdims=True))
            ignored = t2 == ignore if ignore is not None else xp.zeros(t2.shape, dtype=bool)
            t_eff = xp.where(t2 < 0, t2 + c, t2)
            if t2.size:
                bad = xp.any(~ignored & ((t_eff < 0) | (t_eff >= c)))
                be.checks.flag(
                    bad,
                    f"{kn.op_type} node {kn.name!r}: a target in {target_name!r} is out of "
                    f"range [-{c}, {c - 1}]"
                    + (f" and not ignore_index {ignore}" if ignore is not None else "")
                    + " (checked on the device)",
                )
            t_safe = xp.where(ignored, 0, xp.clip(t_eff, 0, max(c - 1, 0)))
            if x3.size:
                picked = xp.take_along_axis(logp, t_safe[:, None, :], axis=1)[:, 0, :]
            else:
                picked = xp.zeros(t2.shape, dtype=ct)
            out = weigh_and_reduce(xp, picked, ignored, weight, t_safe, ignore is not None, red)
            if red == "none":
                out = out.reshape(target.shape)
            res: list[Any] = [xp.asarray(out).astype(x.dtype)]
            if softmax and len(outs) > 1:
                res.append(logp.reshape(x.shape).astype(x.dtype) if want_logp else None)
            return tuple(res)

        return run

    return build


cuda_kernel("SoftmaxCrossEntropyLoss", 12, applies=_applies)(_loss(True))
cuda_kernel("NegativeLogLikelihoodLoss", 12, applies=_applies)(_loss(False))
