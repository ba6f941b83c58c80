"""numba MaxPool at the benchmark models' shapes (resnet/densenet, squeezenet, inception) with
NaN, +inf and -inf scattered through some planes: the fast path (NaN-free input) equals
onnxruntime value for value; an input with a NaN takes the redo by turnout's rule and equals
turnout's numpy kernel. onnxruntime's own NaN results at these shapes follow its vector
kernel's operand order (a window whose max skips a NaN can come out as a smaller value), which
neither turnout kernel reproduces; nor its -FLT_MAX for a window of -inf touching the left
padding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.tools.testing import cpu_session, one_node_model, provider_session, run_onnxruntime

SHAPES = [
    ((1, 64, 112, 112), {"pads": [1, 1, 1, 1]}),  # resnet50, densenet121
    ((1, 64, 111, 111), {}),  # squeezenet
    ((1, 256, 27, 27), {}),
    ((1, 192, 56, 56), {"pads": [0, 0, 1, 1]}),  # inception_v2
    ((1, 480, 13, 13), {"pads": [1, 1, 1, 1], "strides": [1, 1]}),  # inception_v1
]


def _equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # NaN where the other has NaN, else equal


@pytest.mark.parametrize(("shape", "attrs"), SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_model_shapes_with_nan_and_inf(
    shape: tuple[int, ...], attrs: dict[str, Any], threads: int
) -> None:
    rng = np.random.default_rng(shape[1] + threads)
    x = rng.standard_normal(shape).astype(np.float32)
    planes = x.reshape(-1, shape[2] * shape[3])
    for q in range(0, planes.shape[0], 3):  # every third plane: +-inf, some clean
        planes[q, rng.integers(0, planes.shape[1], 4)] = [np.inf, -np.inf, np.inf, -np.inf]
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], **attrs}
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    model = one_node_model(node, [x], 17)
    sess = provider_session(model, "NumbaExecutionProvider", intra_op_num_threads=threads)
    assert [a.source for a in sess.partition_report().assignments] == ["numba"]
    (want,) = run_onnxruntime(node, [x], 17)
    _equal(sess.run(None, {"x": x})[0], want)
    # a plane all -inf (onnxruntime gives -FLT_MAX where such a window meets the left
    # padding; -inf is the max over the window), and NaNs of both signs in every fifth plane
    planes[1, :] = -np.inf
    for q in range(0, planes.shape[0], 5):
        planes[q, rng.integers(0, planes.shape[1], 3)] = [np.nan, -np.nan, np.nan]
    (got,) = sess.run(None, {"x": x})
    (ref,) = cpu_session(model).run(None, {"x": x})
    _equal(got, ref)
    assert np.isnan(got).any()
