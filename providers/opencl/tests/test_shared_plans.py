"""The host-side plans OpenCL's copy kernels take from `turnout.sdk.semantics`, checked without
a device: Slice's per-axis (first index, count, step) select what the CPU kernel's index does.

That is numpy's slicing except where a negative step starts below -dim: ONNX clamps the start
to 0 and the end to -1, so element 0 is taken (onnxruntime agrees; numpy and onnx.reference
select nothing). Before, OpenCL used Python's slicing there.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h

from turnout.graph.errors import InvalidArgument
from turnout.graph.ir import Graph
from turnout.sdk.provider import KernelNode
from turnout.sdk.semantics import shape
from turnout_opencl.kernels.copy import _slice_params


def _slice_node() -> KernelNode:
    node = h.make_node("Slice", ["x", "s", "e"], ["y"], name="slice0")
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("x", "s", "e")],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return KernelNode(Graph.from_proto(graph, {"": 13}).nodes[0], 13, 13)


@pytest.mark.parametrize(
    "start,end,step",
    list(itertools.product([-9, -3, -1, 0, 2, 4, 9], [-9, -2, 0, 3, 9], [-2, -1, 1, 3])),
)
def test_slice_params_select_what_the_cpu_kernel_selects(start: int, end: int, step: int) -> None:
    x = np.arange(5)
    node = _slice_node()
    (begin,), (size,), (k,) = _slice_params(node, (5,), [start], [end], None, [step])
    picked = [begin + i * k for i in range(size)]
    assert picked == x[shape.slice_index(node, (5,), [start], [end], None, [step])].tolist()
    if not (step < 0 and start < -5):
        assert picked == x[start:end:step].tolist()


def test_slice_params_refuse_a_repeated_axis() -> None:
    with pytest.raises(InvalidArgument, match="duplicates"):
        _slice_params(_slice_node(), (2, 3), [0, 0], [1, 1], [1, -1], None)
