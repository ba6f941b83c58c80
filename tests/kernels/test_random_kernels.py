"""Dropout: official cases, identity at inference, seeded masks repeat, unseeded ones vary."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from turnout.errors import InvalidArgument
from turnout.testing import NodeCase, check_official_case, iter_node_cases, run_own_kernel

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
