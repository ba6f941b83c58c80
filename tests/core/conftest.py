"""`contrib_parity`: run one com.microsoft node on turnout and on onnxruntime (or on a numpy
reference of the documented semantics, where onnxruntime's CPU provider has no kernel for the
case), and hold every output to the other within a fraction of the expected output's range.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import turnout
from turnout.tools.testing import one_node_model, positional_inputs

Reference = Callable[..., Sequence[Any]]
Parity = Callable[..., list[np.ndarray]]

# tolerance relative to the expected output's range, by dtype
RANGE_TOL = {np.dtype(np.float32): 1e-3, np.dtype(np.float16): 5e-3, np.dtype(np.float64): 1e-6}


def assert_close_to_range(
    want: np.ndarray, got: np.ndarray, what: str, tol: float, steps: int = 0
) -> None:
    """`got` equals `want` in dtype and shape, and within `tol` x the range of `want` (an
    integer output within `steps` of it: quantization steps a rounding may move)."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.size == 0:
        return
    if want.dtype.kind not in "fc":
        if steps:
            off = int(np.abs(got.astype(np.int64) - want.astype(np.int64)).max())
            assert off <= steps, f"{what}: off by {off} > {steps} quantization step(s)"
        else:
            np.testing.assert_array_equal(got, want, err_msg=what)
        return
    w, g = want.astype(np.float64), got.astype(np.float64)
    span = float(w.max() - w.min()) or float(np.abs(w).max()) or 1.0
    err = float(np.abs(w - g).max())
    assert err <= tol * span, f"{what}: max error {err:.3g} over {tol:g} x range {span:.3g}"


def _run_ort(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # one thread: some kernels' rounding depends on how they split the work (DynamicQuantizeLSTM
    # quantizes each thread's part of the batch on its own range); the oracle must not
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


@pytest.fixture
def contrib_parity() -> Parity:
    """`parity(node, inputs, reference=None, tol=None, opset=17, steps=0)` -> turnout's outputs.

    `inputs` hold one value per node input (None for an absent optional one). Without
    `reference` the oracle is onnxruntime's CPU provider; with it, `reference(*inputs)`.
    Integer outputs must be equal, or within `steps` when that is given. The inputs at the
    indices in `constant` are initializers (onnxruntime wants some constant; its Python API
    feeds no int4 arrays).
    """

    def parity(
        node: onnx.NodeProto,
        inputs: Sequence[Any],
        reference: Reference | None = None,
        tol: float | None = None,
        opset: int = 17,
        steps: int = 0,
        constant: frozenset[int] | set[int] = frozenset(),
    ) -> list[np.ndarray]:
        model = one_node_model(node, inputs, {"": opset})
        values = dict(zip(node.input, positional_inputs(node, inputs)))
        fixed = {node.input[i] for i in constant if node.input[i]}
        kept = [vi for vi in model.graph.input if vi.name not in fixed]
        del model.graph.input[:]
        model.graph.input.extend(kept)
        model.graph.initializer.extend(numpy_helper.from_array(values[n], n) for n in fixed)
        feeds = {n: v for n, v in values.items() if n and n not in fixed}
        got = turnout.InferenceSession(model.SerializeToString()).run(None, feeds)
        if reference is None:
            want = _run_ort(model, feeds)
        else:
            want = [np.asarray(w) for w in reference(*positional_inputs(node, inputs))]
        names = [o for o in node.output if o]
        assert len(got) == len(names) == len(want), (len(got), len(names), len(want))
        for name, w, g in zip(names, want, got):
            limit = tol if tol is not None else RANGE_TOL.get(w.dtype, 1e-3)
            what = f"{node.op_type} output {name!r}"
            assert_close_to_range(w, np.asarray(g), what, limit, steps)
        return [np.asarray(g) for g in got]

    return parity


@pytest.fixture
def float32_oracle() -> Callable[[onnx.NodeProto, Sequence[Any]], Reference]:
    """`float32_oracle(node, inputs)`: a `reference` for float16 cases of ops onnxruntime's
    CPU provider runs in float32 only: its float32 result on the same (exactly widened)
    inputs, its float32 outputs rounded to float16."""
    from turnout.tools.testing import run_onnxruntime

    def oracle(node: onnx.NodeProto, inputs: Sequence[Any]) -> Reference:
        wide = [
            x.astype(np.float32) if isinstance(x, np.ndarray) and x.dtype == np.float16 else x
            for x in inputs
        ]

        def reference(*_: Any) -> list[np.ndarray]:
            got = [np.asarray(y) for y in run_onnxruntime(node, wide, 17)]
            return [y.astype(np.float16) if y.dtype == np.float32 else y for y in got]

        return reference

    return oracle
