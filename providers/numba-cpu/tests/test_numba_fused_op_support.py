"""numba answers the optimizer's fused-op question from its own kernel table and the numpy
kernels it claims where it has none."""

from __future__ import annotations

from turnout_numba.provider import NumbaExecutionProvider


def test_numba_runs_the_fused_ops_of_its_table_and_of_numpy() -> None:
    p = NumbaExecutionProvider({"intra_op_num_threads": 1})
    assert ("ai.turnout", "FusedConv") in p.kernels.ops()
    assert ("ai.turnout", "Attention") not in p.kernels.ops()
    assert p.supports_fused_op("ai.turnout", "FusedConv", 1)  # numba's kernel
    assert p.supports_fused_op("ai.turnout", "Attention", 1)  # numpy's, claimed by numba
    assert not p.supports_fused_op("ai.turnout", "NoSuchFusedOp", 1)
