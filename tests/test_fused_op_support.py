"""The optimizer asks each provider whether it runs a fused op (`supports_fused_op`), not only
its kernel registry: a provider serving kernels from a table of its own gets its fusions."""

from __future__ import annotations

import onnx
from onnx import helper

from turnout.engine.pipeline import _fused_op_support
from turnout.sdk.provider import ExecutionProvider


class _OwnTable(ExecutionProvider):
    """A provider whose kernels live outside `self.kernels` (as numba's do)."""

    name = "OwnTableExecutionProvider"

    def supports_fused_op(self, domain: str, op_type: str, since_version: int) -> bool:
        return (domain, op_type) == ("ai.turnout", "FusedConv")


def _model() -> onnx.ModelProto:
    g = helper.make_graph([], "g", [], [])
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.turnout", 1)]
    )


def test_an_override_lets_a_fusion_fire_without_registry_kernels() -> None:
    supports = _fused_op_support([_OwnTable()], _model())
    assert supports("ai.turnout", "FusedConv", ("Conv", "Relu"))
    assert not supports("ai.turnout", "FusedGemm", ("Gemm", "Relu"))


def test_the_default_asks_the_kernel_registry() -> None:
    empty = ExecutionProvider()
    assert not empty.supports_fused_op("ai.turnout", "FusedConv", 1)
    assert not _fused_op_support([empty], _model())("ai.turnout", "FusedConv", ("Conv",))

    @empty.kernels.register("FusedConv", since=1, domain="ai.turnout")
    def _factory(kn):  # type: ignore[no-untyped-def]
        return lambda *xs: xs

    assert empty.supports_fused_op("ai.turnout", "FusedConv", 1)
    assert _fused_op_support([empty], _model())("ai.turnout", "FusedConv", ("Conv",))
