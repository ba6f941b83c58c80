"""The kernels' logic, checked on the emulated backend (numpy in place of CuPy) against the
onnx package's node test cases: the same capability decisions, kernels and fusion as on a GPU,
with numpy doing the arithmetic. This checks kernel logic, not CUDA (see test_codegen_host.py
for the generated CUDA's arithmetic, and scripts/gpu-check.sh for the GPU itself).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

from turnout.engine.provider_creation import create_provider
from turnout.graph.errors import FallbackError, InvalidArgument
from turnout.tools.testing import (
    NodeCase,
    assert_outputs_close,
    iter_node_cases,
    one_node_model,
    positional_inputs,
    provider_session,
)
from turnout_cupy.emulated import EMULATED_FAILURES, EmulatedFactory

OPS = frozenset(op for _, op in create_provider(EmulatedFactory()).kernels.ops())
CASES = list(iter_node_cases(OPS))


def _run(case: NodeCase, provider: str) -> list[np.ndarray]:
    model = one_node_model(case.node, case.inputs, case.opsets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's own deprecation warnings for old opsets
        sess = provider_session(model, provider)
    feeds = {n: v for n, v in zip(case.node.input, positional_inputs(case.node, case.inputs)) if n}
    return list(sess.run(None, feeds))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_node_case(case: NodeCase, emulated: str) -> None:
    try:
        got = _run(case, emulated)
    except FallbackError as e:  # declined with a reason: not claimed, so not run here
        pytest.skip(f"declined: {e}")
    if case.name in EMULATED_FAILURES:  # strict: a listed case that passes fails the test
        with pytest.raises(AssertionError):
            assert_outputs_close(case.outputs, got, case.rtol, case.atol)
        return
    assert_outputs_close(case.outputs, got, case.rtol, case.atol)


def test_most_cases_are_claimed(emulated: str) -> None:
    """A floor on the claimed share, so a capability regression cannot pass as skips."""
    claimed = 0
    for case in CASES:
        model = one_node_model(case.node, case.inputs, case.opsets)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                provider_session(model, emulated)
            claimed += 1
        except FallbackError:
            pass
    # 1,126 claimed when measured at 575d103; a margin for cases a kernel starts declining
    assert len(CASES) > 800 and claimed >= max(1150, 0.75 * len(CASES)), (claimed, len(CASES))


def _gather_model(axis: int) -> bytes:
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis, name="take_rows")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("bad", [3, -4])
def test_out_of_range_indices_fail_the_run_naming_node_and_input(bad: int, emulated: str) -> None:
    sess = provider_session(_gather_model(0), emulated)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = sess.run(None, {"x": x, "i": np.array([2, -3])})
    np.testing.assert_array_equal(y, x[[2, 0]])
    with pytest.raises(InvalidArgument) as err:
        sess.run(None, {"x": x, "i": np.array([0, bad])})
    assert str(err.value).endswith(
        "Gather node 'take_rows': an index in 'i' is out of range [-3, 2] for axis 0 "
        "(checked on the device)"
    )
    (y,) = sess.run(None, {"x": x, "i": np.array([1, 1])})  # the flag does not stick
    np.testing.assert_array_equal(y, x[[1, 1]])
