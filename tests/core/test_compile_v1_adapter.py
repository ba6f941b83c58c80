"""The deprecated contract-1 compile still works: a provider that overrides `_compile` (and not
`compile_subgraphs`) gets each fused group with the whole graph's view, and its kernels run."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.graph.errors import EPFail
from turnout.graph.ir import GraphView
from turnout.sdk.provider import (
    Capability,
    CompiledKernel,
    Decline,
    ExecutionProvider,
    ProviderFactory,
)

NAME = "V1CompileExecutionProvider"


class V1Provider(ExecutionProvider):
    """Claims Mul -> Relu as one group and compiles it the contract-1 way."""

    name = NAME

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self.broken = bool(options.get("broken"))

    def _get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        names = tuple(n.name for n in graph.unassigned_nodes() if n.op_type in ("Mul", "Relu"))
        return [Capability(names, None, name="mul_relu")], []

    def _compile(self, groups: Sequence[tuple[Capability, GraphView]]) -> list[CompiledKernel]:
        if self.broken:
            raise ValueError("no code generator")
        ((cap, view),) = groups
        assert [n.name for n in view.nodes] == ["mul", "relu"]  # the whole graph
        return [CompiledKernel(cap.name or "g", lambda x: (np.maximum(x * x, 0),), ("x",), ("y",))]


class V1Factory(ProviderFactory):
    name = NAME
    contract_version = 1
    option_names = frozenset({"broken"})

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return V1Provider(options)


@pytest.fixture(autouse=True)
def provider() -> Iterator[None]:
    turnout.register_provider(V1Factory())
    yield
    turnout.sdk.plugins.registry.unregister(NAME)


def _session(**options: Any) -> turnout.InferenceSession:
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "x"], ["s"], name="mul"),
            helper.make_node("Relu", ["s"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return turnout.InferenceSession(model.SerializeToString(), providers=[(NAME, options)])


def test_a_contract_1_provider_compiles_through_the_adapter() -> None:
    with pytest.warns(DeprecationWarning, match="implement fused_groups and compile_subgraphs"):
        sess = _session()
    assert not V1Provider({}).compiles
    (y,) = sess.run(None, {"x": np.array([-2, 0, 3], np.float32)})
    np.testing.assert_array_equal(y, [4, 0, 9])


def test_a_failing_contract_1_compile_names_the_provider() -> None:
    with (
        pytest.raises(EPFail, match=f"{NAME}: compile failed: no code generator"),
        pytest.warns(DeprecationWarning),
    ):
        _session(broken=1)
