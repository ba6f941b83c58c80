"""SoftmaxCrossEntropyLoss: a stable log-softmax over the class axis, then the weighted gather.

onnx.reference (which ran this op before) takes log(softmax(x)), which underflows to log(0) =
-inf for a class far below the row's maximum (logits 1000 and -1000); onnxruntime computes
x - max - log(sum(exp(x - max))), and so does this kernel. Everything else follows the ONNX
reference: the input is viewed as (N, C, D), `ignore_index` targets weigh 0, "mean" with a weight
input or an `ignore_index` divides by the sum of the gathered weights. A target in [-C, 0) counts
from the end (onnxruntime gathers with GatherElements, the reference indexes with it); one
outside [-C, C) that is not `ignore_index` raises InvalidArgument, as onnxruntime refuses it.
Half-precision inputs compute in float32 and round once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.errors import InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode
from turnout.sdk.semantics.loss import check_loss_shapes, weigh_and_reduce

__all__: list[str] = []

Array = np.ndarray[Any, Any]
_REDUCTIONS = ("none", "sum", "mean")


def _supports(kn: KernelNode) -> str | None:
    red = kn.attr("reduction", "mean")
    return None if red in _REDUCTIONS else f"reduction {red!r} is not one of {_REDUCTIONS}"


@cpu_kernel("SoftmaxCrossEntropyLoss", since=12, supports=_supports)
def softmax_cross_entropy_loss(kn: KernelNode) -> KernelFn:
    name = kn.name
    red = kn.attr("reduction", "mean")
    ignore = kn.attr("ignore_index", None)
    outs = kn.node.outputs
    want_logp = len(outs) > 1 and bool(outs[1])

    def run(x: Array, target: Array, weight: Array | None = None) -> tuple[Any, ...]:
        check_loss_shapes(name, x, target, weight)
        n, c = x.shape[0], x.shape[1]
        ct = np.promote_types(x.dtype, np.float32)
        x3 = x.astype(ct, copy=False).reshape(n, c, -1)
        t2 = target.astype(np.int64, copy=False).reshape(n, -1)
        if x3.size:
            s = x3 - np.max(x3, axis=1, keepdims=True)
            logp = s - np.log(np.sum(np.exp(s), axis=1, keepdims=True))
        else:
            logp = x3.copy()
        ignored = t2 == ignore if ignore is not None else np.zeros(t2.shape, bool)
        # negative targets count from the end, as onnxruntime's GatherElements and the
        # reference's indexing do
        t_eff = np.where(t2 < 0, t2 + c, t2)
        bad = ~ignored & ((t_eff < 0) | (t_eff >= c))
        if bad.any():
            raise InvalidArgument(
                f"{name}: target {int(t2[bad][0])} out of range for {c} classes"
                + (f" (ignore_index {ignore})" if ignore is not None else "")
            )
        t_safe = np.where(ignored, 0, t_eff)
        picked = np.take_along_axis(logp, t_safe[:, None, :], axis=1)[:, 0, :]
        out = weigh_and_reduce(np, picked, ignored, weight, t_safe, ignore is not None, red)
        if red == "none":
            out = out.reshape(target.shape)
        res: list[Any] = [np.asarray(out).astype(x.dtype)]
        if len(outs) > 1:
            res.append(logp.reshape(x.shape).astype(x.dtype) if want_logp else None)
        return tuple(res)

    return run
