"""com.microsoft FusedMatMul against onnxruntime: every transpose flag, alpha, batch axes that
broadcast, 2-D and 4-D operands, float and double (float16 against the float32 formula, which
onnxruntime's CPU provider does not run)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from onnx import helper

from turnout.graph.contrib import DOMAIN
from turnout.graph.contrib.ops.matmul import operand_shape


def _input(shape: tuple[int, ...], trans: int, batch: int) -> tuple[int, ...]:
    """The stored shape that `operand_shape` turns into `shape`."""
    s = (shape[-1], shape[-2]) if trans and len(shape) >= 2 else shape[-2:]
    lead = shape[:-2]
    if batch and len(shape) > 2:  # stored (S, B..., K): the first axis moves before the last
        return (s[0], *lead, s[1])
    return (*lead, *s)


CASES = [((2, 3, 4, 5), (2, 3, 5, 6)), ((4, 5), (5, 3)), ((3, 4, 5), (1, 5, 2))]


@pytest.mark.parametrize(("ta", "tb", "ba", "bb"), list(itertools.product((0, 1), repeat=4)))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_fused_matmul(
    contrib_parity: Any, rng: np.random.Generator, ta: int, tb: int, ba: int, bb: int, case: int
) -> None:
    sa, sb = CASES[case]
    if (ba or bb) and len(sa) == 2:
        pytest.skip("onnxruntime refuses batch transpositions of 2-D operands (tested below)")
    a = rng.standard_normal(_input(sa, ta, ba)).astype(np.float32)
    b = rng.standard_normal(_input(sb, tb, bb)).astype(np.float32)
    assert operand_shape(a.shape, bool(ta), bool(ba)) == sa
    attrs = dict(transA=ta, transB=tb, transBatchA=ba, transBatchB=bb, alpha=0.5)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=DOMAIN, **attrs)
    (y,) = contrib_parity(node, [a, b])
    assert y.shape == (*np.broadcast_shapes(sa[:-2], sb[:-2]), sa[-2], sb[-1])


def test_fused_matmul_double_and_float16(contrib_parity: Any, rng: np.random.Generator) -> None:
    a, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 6, 5))
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=DOMAIN, transB=1, alpha=2.0)
    contrib_parity(node, [a, b])
    a16, b16 = a.astype(np.float16), b.astype(np.float16)

    def formula(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
        wide = np.float32(2.0) * (x.astype(np.float32) @ np.swapaxes(y.astype(np.float32), -1, -2))
        return [wide.astype(np.float16)]

    contrib_parity(node, [a16, b16], reference=formula)


@pytest.mark.parametrize("batch", [0, 1])
def test_fused_matmul_errors(rng: np.random.Generator, batch: int) -> None:
    """Operands that do not multiply after the transpositions: InvalidArgument; a batch
    transposition of 2-D operands: Fail, as onnxruntime refuses it."""
    import onnx

    import turnout
    from turnout.graph.errors import Fail, InvalidArgument

    attrs = {"transBatchA": 1} if batch else {"transA": 1}
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=DOMAIN, **attrs)
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    )
    sess = turnout.InferenceSession(model.SerializeToString())
    a, b = np.zeros((4, 5), np.float32), np.zeros((5, 3), np.float32)  # transA: (5, 4) @ (5, 3)
    with pytest.raises(Fail if batch else InvalidArgument, match=r"rank|cannot multiply"):
        sess.run(None, {"a": a, "b": b})
