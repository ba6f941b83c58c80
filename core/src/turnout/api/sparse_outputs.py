"""Graph outputs that are sparse constants come back as `SparseTensor`s, as onnxruntime gives them.

onnxruntime makes a sparse initializer, and a Constant's `sparse_value`, dense at load (so the
graph, `get_outputs()` included, sees a dense tensor), and turns the value back into a COO sparse
tensor where it is a graph output: linear indices of the non-zero entries in row-major order,
whatever indices the model stored. It does so only for 2-D values; any other rank fails the run.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto

from turnout.graph.errors import Fail
from turnout.graph.sparse import SparseTensor

__all__ = ["as_sparse_output", "sparse_constant_outputs"]


def sparse_constant_outputs(model: ModelProto) -> frozenset[str]:
    """The names of `model`'s graph outputs that are sparse initializers or the output of a
    Constant holding a sparse tensor (the loader has named any such attribute `sparse_value`)."""
    g = model.graph
    sparse = {sp.values.name for sp in g.sparse_initializer}
    sparse.update(
        n.output[0]
        for n in g.node
        if n.op_type == "Constant"
        and n.domain in ("", "ai.onnx")
        and n.output
        and any(a.name == "sparse_value" for a in n.attribute)
    )
    return frozenset(o.name for o in g.output if o.name in sparse)


def as_sparse_output(value: np.ndarray, name: str, label: str) -> SparseTensor:
    """The dense value of sparse-constant output `name` as onnxruntime returns it.

    :raises Fail: the value is not 2-D (onnxruntime's execution frame refuses it so).
    """
    if value.ndim != 2:
        raise Fail(
            f"{label}: output {name!r} is a sparse constant of {value.ndim} dimension(s); "
            f"sparse outputs must be 2-D (onnxruntime: Currently do not support dims higher "
            f"than 2 dimensions: {value.ndim})"
        )
    return SparseTensor.from_dense(value)
