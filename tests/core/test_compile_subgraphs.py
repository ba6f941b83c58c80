"""Contract-2 compile: a provider gets each fused group as a `FusedSubgraph` (nodes, typed
boundary, constants) and answers with create/compute/release states."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import turnout
from turnout.graph.errors import EPFail
from turnout.graph.ir import GraphView
from turnout.sdk.provider import (
    CONTRACT_VERSION,
    Capability,
    CompiledState,
    Decline,
    ExecutionProvider,
    FusedSubgraph,
    ProviderFactory,
)

NAME = "SubgraphExecutionProvider"
EVENTS: list[str] = []
SEEN: list[FusedSubgraph] = []


class SubgraphProvider(ExecutionProvider):
    """Claims Add -> Relu as one group and runs it with numpy; `broken` miscounts states."""

    name = NAME
    compiles = True

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        for op in ("Add", "Relu"):
            self.kernels.register(op, since=1)(lambda kn: None)

    def _get_capability(self, graph: GraphView) -> tuple[list[Capability], list[Decline]]:
        names = tuple(n.name for n in graph.unassigned_nodes() if n.op_type in ("Add", "Relu"))
        return [Capability(names, None, name="add_relu")], []

    def compile_subgraphs(self, subgraphs: Sequence[FusedSubgraph]) -> list[CompiledState]:
        SEEN.extend(subgraphs)
        if self.options.get("broken"):
            return []
        (sg,) = subgraphs
        bias = np.asarray(sg.constants["b"])

        def create() -> dict[str, Any]:
            EVENTS.append("create")
            return {"bias": bias}

        def compute(state: dict[str, Any], x: np.ndarray, b: np.ndarray) -> tuple[Any, ...]:
            return (np.maximum(x + state["bias"], 0),)

        def release(state: dict[str, Any]) -> None:
            EVENTS.append("release")

        inputs = tuple(v.name for v in sg.inputs)
        outputs = tuple(v.name for v in sg.outputs)
        return [CompiledState(sg.name, inputs, outputs, compute, create, release)]


class SubgraphFactory(ProviderFactory):
    name = NAME
    contract_version = CONTRACT_VERSION
    option_names = frozenset({"broken"})

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return SubgraphProvider(options)


@pytest.fixture(autouse=True)
def provider() -> Iterator[None]:
    turnout.register_provider(SubgraphFactory())
    gc.collect()  # sessions of earlier tests release their states now, not during this one
    EVENTS.clear()
    SEEN.clear()
    yield
    turnout.sdk.plugins.registry.unregister(NAME)


def _model() -> bytes:
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "b"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array([1, -5, 0], np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


def _session(**options: Any) -> turnout.InferenceSession:
    opts = turnout.SessionOptions()
    opts.graph_optimization_level = turnout.GraphOptimizationLevel.ORT_DISABLE_ALL
    return turnout.InferenceSession(_model(), opts, providers=[(NAME, options)])


def test_the_provider_sees_a_typed_subgraph_and_its_constants() -> None:
    sess = _session()
    (sg,) = SEEN
    assert [n.name for n in sg.nodes] == ["add", "relu"]
    assert [(v.name, v.shape) for v in sg.inputs] == [("x", (3,)), ("b", (3,))]
    assert [v.name for v in sg.outputs] == ["y"] and sg.outputs[0].dtype == np.float32
    np.testing.assert_array_equal(sg.constants["b"], [1, -5, 0])
    assert sg.kernel_node(sg.nodes[0]).op_type == "Add"
    (y,) = sess.run(None, {"x": np.array([1, 2, 3], np.float32)})
    np.testing.assert_array_equal(y, [2, 0, 3])


def test_state_is_created_once_and_released_with_the_session() -> None:
    sess = _session()
    for _ in range(3):
        sess.run(None, {"x": np.zeros(3, np.float32)})
    assert EVENTS == ["create"]
    del sess
    gc.collect()
    assert EVENTS == ["create", "release"]


def test_a_wrong_number_of_states_names_the_provider() -> None:
    with pytest.raises(EPFail, match=f"{NAME}: compile_subgraphs returned 0 states for 1"):
        _session(broken=1)
