"""SparseToDenseMatMul: `alpha * op(A) @ op(B)` with A a 2-D sparse tensor (COO or CSR) and B a
dense 2-D tensor of the same element type; op transposes (`transA`, `transB`). The output is
dense. As in onnxruntime's CPU kernel, `alpha` scales float products only (it is ignored for
double and the integer types)."""

from __future__ import annotations

from turnout.graph.contrib.inference import NodeTypes, TensorType
from turnout.graph.contrib.spec import Arg, Attr, OpSpec, define

_ELEMS = ("float", "double", "int64", "int32", "uint64", "uint32")


def _sparse_to_dense_matmul(types: NodeTypes) -> list[TensorType | None]:
    a, b = types.input(0), types.input(1)
    if b is None:
        return [None]
    if a is None or a.rank != 2 or b.rank != 2:
        return [TensorType(b.elem_type)]
    rows = a.dim(1 if types.attr("transA", 0) else 0)
    cols = b.dim(0 if types.attr("transB", 0) else 1)
    return [TensorType(b.elem_type, (rows, cols))]


define(
    OpSpec(
        "SparseToDenseMatMul",
        (Arg("A", "T"), Arg("B", "T1")),
        (Arg("Y", "T1"),),
        {"T": tuple(f"sparse_tensor({e})" for e in _ELEMS), "T1": _ELEMS},
        _sparse_to_dense_matmul,
        attrs=(Attr("alpha", "float", 1.0), Attr("transA", "int", 0), Attr("transB", "int", 0)),
    )
)
