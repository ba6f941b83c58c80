"""Kernels get their provider's context (options, threads, allocator, transfer, logger) from
the `KernelNode`, instead of module globals."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.sdk.provider import (
    CONTRACT_VERSION,
    ExecutionProvider,
    KernelContext,
    KernelNode,
    ProviderFactory,
)
from turnout.sdk.provider_options import ProviderOption

SEEN: list[KernelContext | None] = []


class ContextProvider(ExecutionProvider):
    name = "ContextExecutionProvider"

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)

        @self.kernels.register("Relu", since=1)
        def relu(kn: KernelNode) -> Any:
            SEEN.append(kn.context)
            scale = np.float32(kn.context.options["scale"]) if kn.context else np.float32(1)
            return lambda x: (np.maximum(x, 0) * scale,)


class ContextFactory(ProviderFactory):
    name = "ContextExecutionProvider"
    contract_version = CONTRACT_VERSION
    options = (
        ProviderOption("scale", (float,), 1.0, "multiplies the result"),
        ProviderOption("intra_op_num_threads", (int,), 0, "threads", minimum=0),
    )

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return ContextProvider(options)


@pytest.fixture(autouse=True)
def provider() -> Iterator[None]:
    turnout.register_provider(ContextFactory())
    SEEN.clear()
    yield
    turnout.sdk.plugins.registry.unregister(ContextFactory.name)


def test_kernel_factories_see_the_context() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = turnout.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = turnout.InferenceSession(
        model.SerializeToString(), opts, providers=[(ContextFactory.name, {"scale": "3"})]
    )
    (ctx,) = SEEN
    assert ctx is not None
    assert (ctx.provider, ctx.threads, ctx.options["scale"]) == (ContextFactory.name, 2, 3.0)
    provider = sess._engine.providers[0]
    assert ctx.allocator is provider.allocator and ctx.data_transfer is provider.data_transfer
    assert ctx.logger.name == "turnout"
    y = sess.run(None, {"x": np.array([-1, 1, 2], np.float32)})[0]
    np.testing.assert_array_equal(y, [0, 3, 6])
