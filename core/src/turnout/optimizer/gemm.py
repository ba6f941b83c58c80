"""Basic pass: MatMul + Add(bias) on 2-D operands becomes one Gemm (as onnxruntime does)."""

from __future__ import annotations

from onnx import TensorProto

from turnout.optimizer.base import Level, PassContext, graph_pass
from turnout.optimizer.graph import OptGraph
from turnout.optimizer.match import Matcher

__all__ = ["matmul_add_to_gemm"]

_GEMM_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}


@graph_pass("matmul_add_to_gemm", Level.BASIC)
def matmul_add_to_gemm(g: OptGraph, ctx: PassContext) -> int:
    """MatMul(A[M,K], B[K,N]) + C (broadcastable to [M,N]) -> Gemm(A, B, C)."""
    if g.opsets.get("", 0) < 9:
        return 0
    changes = 0
    m = Matcher(g)
    for add in list(g.nodes):
        if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.input) != 2:
            continue
        for mi in (0, 1):
            mm = m.op(add.input[mi], "MatMul")
            if mm is None or m.only_reader(mm.output[0]) is None:
                continue
            a, b = g.shape(mm.input[0]), g.shape(mm.input[1])
            c_name = add.input[1 - mi]
            c = g.shape(c_name)
            out = g.shape(add.output[0])
            if a is None or b is None or c is None or len(a) != 2 or len(b) != 2:
                continue
            if g.elem_type(mm.input[0]) not in _GEMM_TYPES or out is None or len(out) != 2:
                continue
            mm_out = (a[0], b[1])
            # C must broadcast to [M, N] without growing the result (unidirectional)
            if len(c) > 2 or any(
                not (cd == 1 or cd == od) for cd, od in zip(c[::-1], mm_out[::-1])
            ):
                continue
            if tuple(out) != mm_out:
                continue
            gemm = g.make_node("Gemm", [mm.input[0], mm.input[1], c_name], [add.output[0]])
            g.insert_before(add, gemm)
            g.remove(mm, add)
            changes += 1
            m = Matcher(g)
            break
    return changes
