"""Dropout: official cases, identity at inference, seeded masks repeat, unseeded ones vary."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from turnout.graph.errors import InvalidArgument
from turnout.tools.testing import NodeCase, check_official_case, iter_node_cases, run_own_kernel

CASES = list(iter_node_cases({"Dropout"}))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_official_cases(case: NodeCase) -> None:
    check_official_case(case)


def _node(seed: int | None = None) -> object:
    extra = {} if seed is None else {"seed": seed}
    return helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], **extra)


def test_inference_is_identity_with_all_true_mask() -> None:
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    y, mask = run_own_kernel(_node(), [x, np.array(0.5, np.float32), np.array(False)])
    assert y is x or np.array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()


def test_seeded_training_repeats_and_scales() -> None:
    x = np.ones((64,), np.float32)
    args = [x, np.array(0.25, np.float32), np.array(True)]
    y1, m1 = run_own_kernel(_node(seed=3), args)
    _, m2 = run_own_kernel(_node(seed=3), args)
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_allclose(y1[m1], 1 / 0.75, rtol=1e-6)
    assert (y1[~m1] == 0).all() and 0 < m1.sum() < 64


def test_bad_ratio_names_node() -> None:
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")
    with pytest.raises(InvalidArgument, match="drop"):
        run_own_kernel(node, [np.ones(3, np.float32), np.array(1.5, np.float32), np.array(True)])


@pytest.mark.parametrize("dtype", [6, 7])
def test_multinomial_draws_the_softmax_distribution_as_onnxruntime_does(dtype: int) -> None:
    """Shape and type as onnxruntime gives them; class frequencies near softmax(logits)."""
    from onnx import TensorProto, helper

    import turnout

    logits = np.log(np.array([[1, 3, 0.0001], [2, 1, 1]], np.float32))
    node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=20000, dtype=dtype, seed=3.0)
    graph = helper.make_graph(
        [node],
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_empty_tensor_value_info("y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    (got,) = turnout.InferenceSession(model.SerializeToString()).run(None, {"x": logits})
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime gives the shape and type")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": logits})
    assert got.shape == want.shape == (2, 20000) and got.dtype == want.dtype
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    for row in range(2):
        freq = np.bincount(got[row], minlength=3) / got.shape[1]
        np.testing.assert_allclose(freq, p[row], atol=0.02)
