"""numba Gather planned once per data shape: a session fed several shapes in turn (the take
path and the compiled loop), a negative axis and out-of-range indices, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.tools.testing import provider_session


def _session(axis: int) -> turnout.InferenceSession:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=axis, name="g0")],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # rank unknown at creation: declare the data's rank so that numba takes the node
    model.graph.input[0].type.tensor_type.shape.dim.add()
    model.graph.input[0].type.tensor_type.shape.dim.add()
    model.graph.input[0].type.tensor_type.shape.dim.add()
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=1)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    return sess


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_follows_the_data_shape_run_after_run(axis: int) -> None:
    sess = _session(axis)
    rng = np.random.default_rng(0)
    for shape in [(2, 3, 4), (2, 3, 4), (5, 1, 7), (300, 40, 3), (2, 3, 4)]:
        d = rng.standard_normal(shape).astype(np.float32)
        n = shape[axis]
        for idx in [np.array(n - 1), np.array([0, -1, n // 2]), rng.integers(-n, n, (3, 2))]:
            (got,) = sess.run(None, {"d": d, "i": idx})
            np.testing.assert_array_equal(got, np.take(d, idx, axis=axis))
        with pytest.raises(turnout.InvalidArgument, match="g0"):
            sess.run(None, {"d": d, "i": np.array([n])})
