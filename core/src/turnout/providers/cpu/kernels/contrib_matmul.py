"""numpy kernel of com.microsoft FusedMatMul: `alpha * op(A) @ op(B)` (op: `transBatch*` moves
the first axis to the second to last place, `trans*` swaps the last two), batch axes broadcast.
float16 and bfloat16 multiply in float32 and round once to the input's type; float and double
in their own type, as onnxruntime's CPU kernels do. As onnxruntime, the batch transpositions ask
for operands of one rank of at least 3 (Fail otherwise)."""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import Fail, InvalidArgument
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []

Array = np.ndarray[Any, Any]


def _operand(x: Array, trans: bool, trans_batch: bool) -> Array:
    """x as it is multiplied: a view, laid out as `operand_shape` says."""
    if x.ndim > 2 and trans_batch:
        x = np.moveaxis(x, 0, -2)
    if x.ndim >= 2 and trans:
        x = np.swapaxes(x, -1, -2)
    return x


@cpu_kernel("FusedMatMul", since=1, domain=DOMAIN)
def fused_matmul(node: KernelNode) -> KernelFn:
    alpha = float(node.attr("alpha", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    batch_a, batch_b = bool(node.attr("transBatchA", 0)), bool(node.attr("transBatchB", 0))
    name = node.name

    def run(a: Array, b: Array) -> tuple[Array]:
        if (batch_a or batch_b) and not (a.ndim == b.ndim and a.ndim > 2):
            # (onnxruntime's status FAIL, the same condition)
            raise Fail(
                f"{name}: transBatchA/transBatchB need A and B of one rank >= 3, "
                f"got {a.shape} and {b.shape}"
            )
        if a.dtype != b.dtype:
            raise InvalidArgument(f"{name}: A {a.dtype} and B {b.dtype} must have one type")
        wide = a.dtype if a.dtype in (np.float32, np.float64) else np.dtype(np.float32)
        x = _operand(a.astype(wide, copy=False), trans_a, batch_a)
        y = _operand(b.astype(wide, copy=False), trans_b, batch_b)
        try:
            out = np.matmul(x, y)
        except ValueError:
            raise InvalidArgument(
                f"{name}: cannot multiply {a.shape} and {b.shape} "
                f"(as {x.shape} and {y.shape} after the transpositions)"
            ) from None
        if alpha != 1.0:
            out = out * wide.type(alpha)
        return (np.asarray(out).astype(a.dtype, copy=False),)

    return run
