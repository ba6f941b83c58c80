"""numpy kernel of com.microsoft SparseToDenseMatMul: `alpha * op(A) @ op(B)`, A a 2-D sparse
tensor, B and the output dense.

As onnxruntime's CPU kernel: A in COO form must carry [NNZ, 2] coordinates (linear indices are
refused), and each entry's product `a * alpha * b` is summed into the output in A's order, so
results are bit-exact; A in CSR form is summed row by row the same way (onnxruntime's Eigen
product sums in another order when B is transposed: the last bit may differ there); block-sparse
A is refused. `alpha` scales float only, as there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.graph.contrib import DOMAIN
from turnout.graph.errors import Fail, InvalidArgument
from turnout.graph.sparse import OrtSparseFormat, SparseTensor
from turnout.providers.cpu.registry import cpu_kernel
from turnout.sdk.provider import KernelFn, KernelNode

__all__: list[str] = []

Array = np.ndarray[Any, Any]


def _coordinates(a: SparseTensor, name: str) -> Array:
    """A's entries as [NNZ, 2] (row, column) coordinates, in the order they are stored."""
    if a.format == OrtSparseFormat.ORT_SPARSE_COO:
        idx = a.as_coo_view().indices()
        if idx.ndim != 2:
            raise Fail(f"{name}: Expecting COO 2-D indices shape (A's indices are linear)")
        return idx
    if a.format == OrtSparseFormat.ORT_SPARSE_CSRC:
        view = a.as_csrc_view()
        rows = np.repeat(np.arange(a.shape[0]), np.diff(view.outer()))
        return np.stack([rows, view.inner()], 1)
    raise InvalidArgument(f"{name}: A must be in COO or CSR format, not {a.format.name}")


@cpu_kernel("SparseToDenseMatMul", since=1, domain=DOMAIN)
def sparse_to_dense_matmul(node: KernelNode) -> KernelFn:
    alpha = float(node.attr("alpha", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    name = node.name

    def run(a: SparseTensor, b: Array) -> tuple[Array]:
        if not isinstance(a, SparseTensor):
            raise InvalidArgument(f"{name}: input A must be a sparse tensor, not a dense one")
        if len(a.shape) != 2 or b.ndim != 2:
            raise Fail(
                f"{name}: A and B must be 2-D matrices; got A {list(a.shape)}, B {list(b.shape)}"
            )
        if a.dtype != b.dtype:
            raise Fail(f"{name}: A holds {a.dtype} and B {b.dtype}; they must have one type")
        op_b = b.T if trans_b else b
        rows, inner = (a.shape[1], a.shape[0]) if trans_a else a.shape
        if inner != op_b.shape[0]:
            raise Fail(
                f"{name}: cannot multiply A {list(a.shape)} by B {list(b.shape)} "
                f"(transA={int(trans_a)}, transB={int(trans_b)}): inner dimensions "
                f"{inner} and {op_b.shape[0]} differ"
            )
        idx = _coordinates(a, name)
        m, k = (idx[:, 1], idx[:, 0]) if trans_a else (idx[:, 0], idx[:, 1])
        out = np.zeros((rows, op_b.shape[1]), b.dtype)
        if idx.size and (k.max() >= inner or m.max() >= rows):
            raise Fail(f"{name}: a COO index of A is out of bounds for shape {list(a.shape)}")
        values = a.values()
        if values.dtype == np.float32:
            values = values * np.float32(alpha)
        np.add.at(out, m, values[:, None] * op_b[k])  # in A's order, as onnxruntime's loop
        return (out,)

    return run
